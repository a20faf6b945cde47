"""How long a recipe's boot may take: the longest boot it predicts (a compile miss), and the wait that covers it.

One place for the figure, so the lane's own readiness wait (`lane.boot`) and
a Kubernetes startupProbe (`recipes.k8s`) never disagree about it. A compile
miss on the write-up's box takes about 1,910 s (weights 236 s, torch.compile
1,083 s, FlashInfer autotune 508 s, the rest and the graph captures); the
embedded engine models the same phases (`gb300lane/engine/modelled_boot.py`) and sleeps
them times its `time_scale`.
"""

from __future__ import annotations

from gb300lane.recipes.schema import Recipe

#: A modelled compile miss, in the box's seconds (the embedded engine's phases add up to it).
MISS_MODELLED_S = 1910.0
#: What a real vLLM boot is given: a miss compiles and autotunes for about half an hour, so twice that.
VLLM_TIMEOUT_S = 3600.0
#: What an embedded boot is given beyond twice its scaled miss (starting Python, loading the model).
EMBEDDED_BASE_S = 60.0


def miss_seconds(recipe: Recipe) -> float:
    """The longest boot the recipe predicts: a compile miss, scaled by the embedded engine's time_scale."""
    if recipe.engine == "embedded":
        return MISS_MODELLED_S * (recipe.engine_args.time_scale or 0.0)
    return MISS_MODELLED_S


def boot_limit_s(recipe: Recipe) -> float:
    """How long a boot of the recipe is waited for before it counts as failed: generous for a miss."""
    if recipe.engine == "embedded":
        return EMBEDDED_BASE_S + 2 * miss_seconds(recipe)
    return VLLM_TIMEOUT_S
