"""gb300lane: run one LLM serving lane on evidence.

Recipes declare the lane, render turns them into containers, up boots and
checks them, bench and smoke measure them, cards bracket a change between two
controls, and promote / rollback move production between recipes.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
