"""Progressive-shrinking training of the supernet, driven by a YAML recipe.

``load_recipe`` validates a recipe before any work; ``train`` runs its phases and returns the
path of the final supernet file. Both are imported lazily so that ``ofa.data`` can use the schema
helpers of this package without an import cycle, and the CLI stays quick to start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ofa.train.loop import train
    from ofa.train.recipe import Recipe, load_recipe

__all__ = ["Recipe", "load_recipe", "train"]


def __getattr__(name: str) -> Any:
    if name in ("Recipe", "load_recipe"):
        from ofa.train import recipe

        return getattr(recipe, name)
    if name == "train":
        from ofa.train.loop import train

        return train
    raise AttributeError(f"module 'ofa.train' has no attribute {name!r}")
