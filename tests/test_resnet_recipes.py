"""The OFA-ResNet recipes: they parse, every phase keeps to its choices, and one step of each trains."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ofa.families.registry import family_of
from ofa.families.resnet.space import ResNetSpace
from ofa.train import load_recipe
from ofa.train.sampling import step_subnets

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {
    "digits": ROOT / "recipes" / "digits_resnet.yaml",
    "imagenet": ROOT / "recipes" / "imagenet_resnet50.yaml",
    "tiny": ROOT / "tests" / "recipes" / "tiny_resnet.yaml",
}
PHASES = {
    "digits": ["full", "depth_1", "depth_2", "expand_1", "expand_2", "width"],
    "imagenet": ["full", "depth_1", "depth_2", "expand_1", "expand_2", "width_1", "width_2"],
    "tiny": ["full", "depth", "expand", "width"],
}


def _load(name: str, tmp_path: Path, *overrides: str):
    if name != "imagenet":
        return load_recipe(RECIPES[name], list(overrides))
    for split in ("train", "val"):
        (tmp_path / split).mkdir()
    return load_recipe(RECIPES[name], [f"data.root={tmp_path}", *overrides])


@pytest.mark.parametrize("name", list(RECIPES))
def test_recipe_opens_depth_then_expand_then_width(name, tmp_path):
    r = _load(name, tmp_path)
    assert isinstance(r.space, ResNetSpace) and [p.name for p in r.phases] == PHASES[name]
    full, *_, last = r.phases
    assert full.choices["depths"] == (max(r.space.depths),) and full.choices["expands"] == (max(r.space.expands),)
    assert full.choices["widths"] == (len(r.space.widths) - 1,)
    assert last.choices == r.space.elastic_dims()
    opened = [next(d for d in ("depths", "expands", "widths") if len(p.choices[d]) > 1) for p in r.phases[1:]]
    assert opened == sorted(opened, key=("depths", "expands", "widths").index)  # depth -> expand -> width
    assert all(type(e) is float for p in r.phases for e in p.choices["expands"])


def test_imagenet_recipe_is_the_published_space(tmp_path):
    r = _load("imagenet", tmp_path)
    assert r.space == dataclasses.replace(ResNetSpace.ofa_resnet50(), dropout=0.1)
    assert r.space.resolutions == tuple(range(128, 225, 4)) and r.data.image_size == 224


@pytest.mark.parametrize("name", list(RECIPES))
def test_one_step_of_each_phase_trains_its_subnets(name, tmp_path):
    """Each phase's first subnets of step 0 (a batch of two at the smallest resolution; ImageNet's first and
    last phase only, at 32 px) take a gradient and keep to the phase's choices."""
    r = _load(name, tmp_path, *(["space.resolutions=[32]"] if name == "imagenet" else []))
    torch.manual_seed(0)
    net = family_of(r.space).supernet_type(r.space)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    res = min(r.space.resolutions)
    x, y = torch.randn(2, r.space.in_channels, res, res), torch.tensor([0, 1])
    phases = [r.phases[0], r.phases[-1]] if name == "imagenet" else r.phases
    for p, phase in enumerate(phases):
        phase = dataclasses.replace(phase, choices={**phase.choices, "resolutions": (res,)})
        for arch in step_subnets(r.space, phase, False, r.seed, p, 0, 0)[:2]:
            for dim in ("depths", "expands", "widths"):
                skip = {min(r.space.depths)} if dim == "depths" else set()  # the stem gene's skip
                assert set(getattr(arch, dim)) <= set(phase.choices[dim]) | skip, (phase.name, dim)
            net.set_active(arch)
            optimizer.zero_grad()
            F.cross_entropy(net(x), y).backward()
            assert torch.isfinite(net.head.fc.weight.grad).all() and net.head.fc.weight.grad.abs().sum() > 0
            # Batch norm over two images at ImageNet's 1x1 last maps has gradients near 1e10: unclipped, one
            # step saturates the next subnet's loss to 0 on some CPUs' rounding.
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
