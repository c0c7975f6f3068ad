"""The OFA-ProxylessNAS recipes: each parses to the space and schedule it says, and takes a training step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from ofa.families.proxyless.space import ProxylessSpace
from ofa.train import load_recipe
from ofa.train.distributed import process_group
from ofa.train.loop import Trainer

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "recipes" / "digits_proxyless.yaml"
IMAGENET = ROOT / "recipes" / "imagenet_proxyless.yaml"


def _image_folder(root: Path, classes: int = 2, per_class: int = 3, size: int = 40) -> Path:
    """A tiny ImageFolder tree (train/ and val/): a few random RGB images per class."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in range(classes):
            folder = root / split / f"class{c}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return root


def _step_last_phase(recipe) -> float:
    """One optimizer step of the recipe's last phase (teacher taken, channels sorted, as training does it)."""
    with process_group(recipe.device) as env:
        trainer = Trainer(recipe, None, env)
        p = len(recipe.phases) - 1
        trainer.begin_phase(p)
        trainer.session.schedule_lr(trainer.ps.optimizer, recipe.phases[p], recipe.schedule, 0, 0)
        x, y = next(iter(trainer.session.train_loader))
        before = {k: v.clone() for k, v in trainer.net.state_dict().items()}
        loss = trainer.ps(p, 0, 0, x, y)
        moved = [
            k for k, v in trainer.net.state_dict().items() if v.is_floating_point() and not torch.equal(v, before[k])
        ]
    assert np.isfinite(loss) and loss > 0
    assert any(k.startswith("blocks.") for k in moved) and any(k.startswith("classifier.") for k in moved)
    return loss


def test_digits_recipe_is_a_16px_proxyless_space_and_steps():
    r = load_recipe(DIGITS, ["data.batch_size=8"])
    space = r.space
    assert isinstance(space, ProxylessSpace) and space.to_dict()["family"] == "proxyless"
    assert [p.name for p in r.phases] == ["full", "kernel", "depth_1", "depth_2", "expand_1", "expand_2"]
    assert r.phases[-1].choices["expands"] == (2, 3, 4) and r.phases[-1].reorganize_channels
    assert space.stage_input_hw(16, space.num_stages - 1) == 4  # spatial size left for the last stage
    assert space.stage_input_hw(12, space.num_stages) >= 2
    assert (space.in_channels, space.num_classes) == (1, 10) and r.data.name == "digits"
    _step_last_phase(r)


def test_imagenet_recipe_is_the_published_w13_space_with_the_official_schedule(tmp_path):
    root = _image_folder(tmp_path / "imagenet")
    r = load_recipe(IMAGENET, [f"data.root={root}"])
    assert r.space == ProxylessSpace.preset("ofa_proxyless_d234_e346_k357_w1.3")
    assert r.space.feature_channels == 1664 and r.space.resolutions == tuple(range(128, 225, 4))
    got = [(p.name, *(p.choices[d] for d in ("kernels", "expands", "depths")), p.epochs, p.lr) for p in r.phases]
    assert got == [
        ("full", (7,), (6,), (4,), 180, 2.6),
        ("kernel", (3, 5, 7), (6,), (4,), 120, 0.96),
        ("depth_1", (3, 5, 7), (6,), (3, 4), 25, 0.08),
        ("depth_2", (3, 5, 7), (6,), (2, 3, 4), 120, 0.24),
        ("expand_1", (3, 5, 7), (4, 6), (2, 3, 4), 25, 0.08),
        ("expand_2", (3, 5, 7), (3, 4, 6), (2, 3, 4), 120, 0.24),
    ]
    assert r.optimizer.lr_reference_batch == 2048 and r.distill.teacher == "full"
    tiny = ["data.batch_size=2", "data.num_workers=0", "data.val_fraction=0.2", "space.num_classes=2"]
    tiny += ["space.resolutions=[128]", "data.image_size=128"]
    _step_last_phase(load_recipe(IMAGENET, [f"data.root={root}", *tiny]))
