"""Resume: a run killed with SIGKILL at a random point and resumed ends bit-identical to an
uninterrupted one; a damaged checkpoint is a clear error and its predecessor stays; a changed
recipe or world size is refused in one line naming the key, except the allowlisted keys."""

from __future__ import annotations

import json
import random
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import TINY_RECIPE as TINY
from helpers import kill_at_step

from ofa.cli import main
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.train import load_recipe, train
from ofa.train.checkpoint import CheckpointStore
from ofa.train.recipe import recipe_from_dict
from ofa.utils.errors import OFAError
from ofa.utils.io import save_torch

# Checkpoint every 2 steps (the schedule, and so the weights, do not depend on it).
OVERRIDES = ["checkpoint.every_steps=2"]


# No training-curves PNG (tests/conftest.py `no_curves`): drawing it is a fair share of runs this small.
pytestmark = pytest.mark.usefixtures("no_curves")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    train(load_recipe(TINY, OVERRIDES), out)
    return out


def _state(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]


def _epoch_rows(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    drop = ("seconds", "images_per_s", "elapsed_s", "cpu_s")
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def test_sigkill_at_a_random_step_then_resume_is_bitwise_identical(reference, tmp_path):
    out = tmp_path / "run"
    total = 4 * 9  # 4 epochs of 9 steps
    kill_after = random.randint(2, total - 8)
    cmd = [
        sys.executable,
        "-m",
        "ofa",
        "train",
        str(TINY),
        "--out",
        str(out),
        *[a for o in OVERRIDES for a in ("--set", o)],
    ]
    returncode = kill_at_step(cmd, out / "checkpoints", kill_after)
    assert returncode == -signal.SIGKILL, f"the run ended before it could be killed (after step {kill_after})"
    assert not (out / "supernet.pt").exists()

    resumed = train(load_recipe(TINY, OVERRIDES), out, resume=True)

    ref, got = _state(reference / "supernet.pt"), _state(resumed)
    assert ref.keys() == got.keys()
    different = [k for k in ref if not torch.equal(ref[k], got[k])]
    assert not different, f"killed after step >= {kill_after}: {different[:5]} differ"
    assert _epoch_rows(out) == _epoch_rows(reference)  # metrics.jsonl continues without duplicates


def test_damaged_checkpoint_is_named_and_its_predecessor_kept(reference, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    (out / "supernet.pt").unlink()
    paths = CheckpointStore(out / "checkpoints").paths()
    assert len(paths) == 2
    previous, latest = paths  # oldest first
    latest.write_bytes(latest.read_bytes()[:1000])  # truncated, as by a full disk
    with pytest.raises(OFAError) as err:
        train(load_recipe(TINY, OVERRIDES), out, resume=True)
    message = str(err.value)
    assert str(latest) in message and "corrupted or truncated" in message and str(previous) in message
    assert previous.exists() and latest.exists()  # nothing deleted

    latest.unlink()  # as the message suggests: resume from the previous checkpoint
    path = train(load_recipe(TINY, OVERRIDES), out, resume=True)
    ref = _state(reference / "supernet.pt")
    assert all(torch.equal(ref[k], v) for k, v in _state(path).items())


def test_resume_refuses_a_different_space(reference, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference / "checkpoints", out / "checkpoints")
    with pytest.raises(OFAError, match="search space differs"):
        train(load_recipe(TINY, [*OVERRIDES, "space.final_expand_width=24"]), out, resume=True)


def _copy_run(reference: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    return out


def _edit_latest_checkpoint(out: Path, edit) -> None:
    path = CheckpointStore(out / "checkpoints").paths()[-1]
    state = torch.load(path, weights_only=True)
    edit(state)
    save_torch(path, state)


def _fewer_phases():
    raw = yaml.safe_load(TINY.read_text())
    raw["phases"] = raw["phases"][:2]
    return recipe_from_dict(raw, str(TINY))


@pytest.mark.parametrize(
    ("changed", "key", "values"),
    [
        (lambda: load_recipe(TINY, [*OVERRIDES, "phases.expand.epochs=2"]), "phases[2].epochs", "is 2, but"),
        (_fewer_phases, "phases", "is 2 entries ['full', 'depth'], but"),
        (lambda: load_recipe(TINY, [*OVERRIDES, "phases.depth.lr=0.1"]), "phases[1].lr", "is 0.1, but"),
        (lambda: load_recipe(TINY, [*OVERRIDES, "data.batch_size=8"]), "data.batch_size", "is 8, but"),
    ],
)
def test_resume_refuses_a_changed_recipe_naming_the_key(reference, tmp_path, changed, key, values):
    out = _copy_run(reference, tmp_path)
    before = (out / "recipe.yaml").read_bytes()
    with pytest.raises(OFAError) as err:
        train(changed(), out, resume=True)
    message = str(err.value)
    assert f"{TINY}: {key} {values}" in message and "trained with" in message and "\n" not in message
    assert (out / "recipe.yaml").read_bytes() == before


def test_resume_refuses_another_world_size_and_the_cli_exits_2(reference, tmp_path, capsys):
    out = _copy_run(reference, tmp_path)
    assert torch.load(CheckpointStore(out / "checkpoints").paths()[-1], weights_only=True)["world_size"] == 1
    _edit_latest_checkpoint(out, lambda s: s.update(world_size=2))
    with pytest.raises(OFAError, match=r"trained on 2 process\(es\), this run has 1"):
        train(load_recipe(TINY, OVERRIDES), out, resume=True)

    _edit_latest_checkpoint(out, lambda s: s.update(world_size=1))
    argv = ["train", str(TINY), "--out", str(out), "--resume", *[a for o in OVERRIDES for a in ("--set", o)]]
    assert main([*argv, "--set", "phases.full.epochs=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "phases[0].epochs is 3" in err


def test_resume_accepts_allowlisted_changes_and_keeps_recipe_yaml(reference, tmp_path, capsys):
    out = _copy_run(reference, tmp_path)
    before = (out / "recipe.yaml").read_bytes()
    capsys.readouterr()
    path = train(load_recipe(TINY, [*OVERRIDES, "eval.calib_batches=3", "data.root=/elsewhere"]), out, resume=True)
    printed = capsys.readouterr().out
    assert "resuming with eval.calib_batches 2 -> 3" in printed
    assert "data.root: None -> /elsewhere: resuming on a moved copy" in printed
    assert (out / "recipe.yaml").read_bytes() == before  # the recipe the run started with
    assert OFAMobileNetV3.load(path).meta["recipe"]["eval"]["calib_batches"] == 3  # the one it continued with


def test_a_checkpoint_without_a_recipe_resumes_with_one_warning(reference, tmp_path, capsys):
    out = _copy_run(reference, tmp_path)

    def forget(state):
        del state["meta"]["recipe"]
        del state["world_size"]

    _edit_latest_checkpoint(out, forget)
    capsys.readouterr()
    path = train(load_recipe(TINY, [*OVERRIDES, "phases.depth.lr=0.1"]), out, resume=True)
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "records no recipe and world size" in warnings[0]
    assert path.is_file()
