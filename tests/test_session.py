"""The training session under the benchmark's from-scratch loop: the recorded 2-epoch runs reproduce bit for bit.

``bench/ps_runs.py`` caches finished scratch runs by `ScratchRun.key`, so a loop that trained
differently would mix old and new runs in one report. The fixture was recorded by the loop as it was
before the session existed (see its ``recorded_with``); the same seed must give the same weights,
accuracies and cache key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
import torch
from helpers import TINY_RECIPE

from bench import ps_runs
from ofa.data.datasets import build_data
from ofa.families.mbv3.arch import Arch
from ofa.train import load_recipe
from ofa.train.distributed import DistEnv
from ofa.train.session import SessionConfig, TrainingSession
from ofa.utils.errors import OFAError

FIXTURE = json.loads((Path(__file__).resolve().parent / "fixtures" / "scratch_tiny_2epochs.json").read_text())
RECORDED = FIXTURE["runs"]
SAME_KERNELS = torch.backends.cpu.get_cpu_capability() == FIXTURE["cpu_capability"]


def _weights_sha256(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for key, tensor in model.state_dict().items():
        h.update(key.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_scratch_twin_reproduces_the_recorded_run_bitwise(name, tmp_path, monkeypatch):
    want = RECORDED[name]
    recipe = load_recipe(TINY_RECIPE, want["overrides"])
    run = ps_runs.ScratchRun(Arch.from_dict(want["arch"]), want["lr"], want["epochs"], want["seed"])
    trained = []
    train = ps_runs.train_from_scratch
    monkeypatch.setattr(ps_runs, "train_from_scratch", lambda *args: trained.append(train(*args)) or trained[-1])
    got = ps_runs.scratch_run(recipe, run, build_data(recipe.data), tmp_path, "scratch")
    assert got["key"] == want["key"]  # the cache key is unchanged, so the recorded runs stay valid
    if SAME_KERNELS:  # the instruction set the fixture was recorded on: bit for bit
        assert _weights_sha256(trained[0].model) == want["weights_sha256"]
        assert (got["val_top1"], got["test_top1"]) == (want["val_top1"], want["test_top1"])
    else:  # other float kernels round differently; the same training still lands on the same accuracy
        assert got["val_top1"] == pytest.approx(want["val_top1"], abs=2.0)
        assert got["test_top1"] == pytest.approx(want["test_top1"], abs=2.0)


def test_an_interrupted_scratch_run_resumes_to_the_weights_and_record_of_an_uninterrupted_one(tmp_path, monkeypatch):
    want = RECORDED[sorted(RECORDED)[0]]
    recipe = load_recipe(TINY_RECIPE, want["overrides"])
    run = ps_runs.ScratchRun(Arch.from_dict(want["arch"]), want["lr"], want["epochs"], want["seed"])
    data = build_data(recipe.data)
    trained, train = [], ps_runs.train_from_scratch
    monkeypatch.setattr(ps_runs, "train_from_scratch", lambda *args: trained.append(train(*args)) or trained[-1])
    whole = ps_runs.scratch_run(recipe, run, data, tmp_path / "whole", "scratch")
    save = TrainingSession.save

    def save_then_die(self, state):  # the process is killed right after its first epoch's checkpoint
        save(self, state)
        raise KeyboardInterrupt

    cut = tmp_path / "cut"
    with monkeypatch.context() as patch:
        patch.setattr(TrainingSession, "save", save_then_die)
        with pytest.raises(KeyboardInterrupt):
            ps_runs.scratch_run(recipe, run, data, cut, "scratch")
    folder = cut / f"scratch-{run.key(recipe)}"
    assert len(list((folder / "checkpoints").iterdir())) == 1 and not list(cut.glob("*.json"))
    resumed = ps_runs.scratch_run(recipe, run, data, cut, "scratch")
    assert _weights_sha256(trained[-1].model) == _weights_sha256(trained[0].model)
    assert {k: v for k, v in resumed.items() if "seconds" not in k} == {
        k: v for k, v in whole.items() if "seconds" not in k
    }
    assert resumed["cpu_seconds"] > 0 and not folder.exists()  # the record stays, the checkpoints go


def test_session_refusals_name_the_field():
    recipe = load_recipe(TINY_RECIPE, ["data.batch_size=200"])  # more than the 144 training images
    with pytest.raises(OFAError, match=r"tiny.yaml: data.batch_size: a global batch of 200 is larger than the"):
        TrainingSession(SessionConfig.of(recipe), DistEnv.single_process())
    recipe = load_recipe(TINY_RECIPE)
    session = TrainingSession(SessionConfig.of(recipe), DistEnv.single_process())
    space = dataclasses.replace(recipe.space, num_classes=10)
    with pytest.raises(OFAError, match=r"^tiny: num_classes 10 != 4 \(synthetic\)$"):
        session.require_fit(space, "tiny: {key} {have} != {want} ({data})")


def test_session_recalibrates_on_training_images_as_the_recipe_says():
    def first_calibration_batch(*overrides: str) -> tuple[torch.Tensor, torch.Tensor]:
        recipe = load_recipe(TINY_RECIPE, list(overrides))
        return next(iter(TrainingSession(SessionConfig.of(recipe), DistEnv.single_process()).calib_loader))

    augmented = first_calibration_batch("data.augment=light")
    plain = first_calibration_batch("data.augment=light", "data.calib_augment=false")
    never_augmented = first_calibration_batch("data.augment=none")
    assert torch.equal(plain[1], augmented[1])  # the same images, in the same order...
    assert not torch.equal(plain[0], augmented[0])  # ... augmented by default
    assert torch.equal(plain[0], never_augmented[0])  # calib_augment false: as evaluation transforms them
