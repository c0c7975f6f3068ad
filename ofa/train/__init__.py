"""Progressive-shrinking training of the supernet, driven by a YAML recipe.

``load_recipe`` validates a recipe before any work; ``train`` (``train_file`` from a recipe
file) runs its phases and returns the path of the final supernet file; ``prepare_run_folder``
is the guard against starting a run over another.
"""

from ofa.train.loop import train, train_file
from ofa.train.recipe import Recipe, load_recipe
from ofa.train.resume import prepare_run_folder

__all__ = ["Recipe", "load_recipe", "prepare_run_folder", "train", "train_file"]
