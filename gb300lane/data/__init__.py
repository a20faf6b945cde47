"""Data shipped with the package, read through `gb300lane.paths` / importlib.resources.

    recipes/                    the versioned lane recipes (v26, v27, k9 and their local- twins)
    cards/                      the card files (the write-up's BR1/BR2 and their local versions)
    receipts/2026-10-26-*/      the write-up's transcribed receipts (read-only; `card reproduce` re-derives them)
    vllm-<version>-schema.json  vLLM's config fields, snapshot by scripts/snapshot_vllm_schema.py
"""
