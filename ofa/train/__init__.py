"""Progressive-shrinking training of the supernet, driven by a YAML recipe.

``load_recipe`` validates a recipe before any work; ``train`` (``train_file`` from a recipe
file) runs its phases and returns the path of the final supernet file; ``prepare_run_folder``
is the guard against starting a run over another.

The names are imported on first use (PEP 562): the package's small modules (``bn``, ``checkpoint``) serve
search, export and the latency tables, which should not import the training loop and its data sets.
"""

import importlib
from typing import Any

_HOME = {
    "Recipe": "ofa.train.recipe",
    "load_recipe": "ofa.train.recipe",
    "prepare_run_folder": "ofa.train.resume",
    "train": "ofa.train.loop",
    "train_file": "ofa.train.loop",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'ofa.train' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)
