"""Transfer to a user's data: fresh classifier, folded stem, and recipes that start from a supernet file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from helpers import TINY_RECIPE as TINY
from helpers import perturb

from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.families.mbv3.transfer import adapt_supernet, derive_space, fold_input_channels, rehead
from ofa.train import load_recipe, train
from ofa.train.distributed import DistEnv
from ofa.train.loop import Trainer
from ofa.utils.errors import OFAError


@pytest.fixture
def source(tmp_path) -> Path:
    """A trained-looking RGB, 10-class supernet of the tiny recipe's space."""
    space = replace(load_recipe(TINY).space, num_classes=10, in_channels=3)
    torch.manual_seed(5)
    net = perturb(OFAMobileNetV3(space), seed=5)
    return net.save(tmp_path / "source.pt", meta={"mean": [0.4, 0.5, 0.6], "std": [0.2, 0.2, 0.2]})


def _recipe(tmp_path: Path, source: Path, space: dict | None = None, overrides: tuple[str, ...] = ()):
    raw = yaml.safe_load(TINY.read_text())
    raw["init"] = {"supernet": str(source)}
    del raw["space"]
    if space is not None:
        raw["space"] = space
    path = tmp_path / "init.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_recipe(path, overrides)


def _initial_net(recipe) -> OFAMobileNetV3:
    return Trainer(recipe, None, DistEnv.single_process()).net


def test_rehead_and_fold_keep_every_other_weight(source):
    net = OFAMobileNetV3.load(source)
    new = fold_input_channels(rehead(net, 4, seed=1), 1)
    assert (new.space.num_classes, new.space.in_channels) == (4, 1)
    assert new.meta == {"mean": [pytest.approx(0.5)], "std": [pytest.approx(0.2)], "fresh_classifier": True}
    kept = [k for k in net.state_dict() if not k.startswith(("classifier.", "conv_stem."))]
    assert all(torch.equal(new.state_dict()[k], net.state_dict()[k]) for k in kept)
    assert torch.allclose(new.conv_stem.weight, net.conv_stem.weight.sum(1, keepdim=True))
    assert torch.equal(rehead(net, 4, seed=1).classifier.weight, new.classifier.weight)  # seeded
    assert not torch.equal(rehead(net, 4, seed=2).classifier.weight, new.classifier.weight)
    with pytest.raises(OFAError, match="--num-classes: must be positive"):
        rehead(net, 0)


def test_recipe_init_starts_from_the_supernet_fitted_to_the_data(tmp_path, source):
    recipe = _recipe(tmp_path, source, {"num_classes": 4, "in_channels": 1})
    assert recipe.space == replace(OFAMobileNetV3.load(source).space, num_classes=4, in_channels=1)
    start = adapt_supernet(OFAMobileNetV3.load(source), recipe.space, recipe.seed)
    net = _initial_net(recipe)
    for key, value in start.state_dict().items():
        assert torch.equal(net.state_dict()[key], value), key
    assert load_recipe(tmp_path / "init.yaml") == recipe


def test_recipe_init_may_only_change_classes_channels_resolutions_dropout(tmp_path, source):
    with pytest.raises(OFAError, match=r"space\.kernels: differs from the starting supernet's"):
        _recipe(tmp_path, source, {"num_classes": 4, "in_channels": 1, "kernels": [3]})
    with pytest.raises(OFAError, match="not an ofa supernet file"):
        _recipe(tmp_path, Path(__file__).resolve().parent / "fixtures" / "ofa_mbv3_w0.5_c10_random.pth")
    base = OFAMobileNetV3.load(source).space
    assert derive_space(base, {"resolutions": [6], "dropout": 0.0}).resolutions == (6,)


def test_reheaded_init_supernet_cannot_teach_but_an_unchanged_one_does(tmp_path, source):
    with pytest.raises(OFAError, match=r"distill\.teacher: init: .* re-headed \(10 -> 4 classes\)") as err:
        _recipe(tmp_path, source, {"num_classes": 4, "in_channels": 1}, ("distill.teacher=init",))
    assert "\n" not in str(err.value)
    with pytest.raises(OFAError, match=r"distill\.teacher: init needs init\.supernet"):
        load_recipe(TINY, ["distill.teacher=init"])
    # Same classes and channels: the supernet as loaded teaches from the first phase on.
    rgb10 = OFAMobileNetV3.load(source)
    four = rehead(fold_input_channels(rgb10, 1), 4)
    four.save(tmp_path / "four.pt")
    recipe = _recipe(
        tmp_path,
        tmp_path / "four.pt",
        None,
        ("distill.teacher=init", "phases=[{name: full, epochs: 1, lr: 0.01}]", "eval.calib_batches=1"),
    )
    path = train(recipe, tmp_path / "run")
    ckpt = torch.load(sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    for key, value in four.state_dict().items():
        if not key.endswith("num_batches_tracked"):  # BN momentum 0: the statistics stay as loaded
            assert torch.equal(ckpt["teacher"][key], value), key
    assert OFAMobileNetV3.load(path).space == four.space
