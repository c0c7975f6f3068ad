"""Resume: a run killed with SIGKILL at a random point and resumed ends bit-identical to an
uninterrupted one; a damaged checkpoint is a clear error and its predecessor stays."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import TINY_RECIPE as TINY

from ofa.errors import OFAError
from ofa.train import load_recipe, train
from ofa.train.checkpoint import CheckpointStore

# Checkpoint every 2 steps (the schedule, and so the weights, do not depend on it).
OVERRIDES = ["checkpoint.every_steps=2"]


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
    store = CheckpointStore(out / "checkpoints")
    total = 4 * 9  # 4 epochs of 9 steps
    kill_after = random.randint(2, total - 8)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "ofa", "train", str(TINY), "--out", str(out),
           *[a for o in OVERRIDES for a in ("--set", o)]]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            paths = store.paths()
            if paths and int(paths[-1].stem.split("-")[1]) >= kill_after:
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"the run ended before it could be killed (after step {kill_after})"
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
