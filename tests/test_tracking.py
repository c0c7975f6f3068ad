"""Tracking sinks: one line and nothing else when a library is missing; W&B and MLflow get the same figures."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from helpers import scalar_series

from ofa.utils.tracking import LoggingConfig, Tracker, log_figures, open_tracker

EPOCH = {
    "kind": "epoch",
    "step": 10,
    "loss": 1.5,
    "lr": 0.1,
    "images_per_s": 100.0,
    "noise_scale": {"b_simple": 42.0, "updates": 3, "trace": None},
}
EVAL = {
    "kind": "eval",
    "split": "val",
    "phase": "full",
    "step": 10,
    "subnets": {"r8-k5-e3-d2": {"top1": 75.0, "loss": 0.7}, "r6-k3-e2-d1": {"top1": 50.0, "loss": 1.2}},
}
TEST = {"kind": "test", "step": 12, "subnets": {"r8-k5-e3-d2": {"top1": 80.0, "loss": 0.5}}}


def test_missing_tensorboard_is_one_line_and_training_goes_on(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # importing it now fails
    notes: list[str] = []
    tracker = open_tracker(LoggingConfig(), tmp_path, {}, 0, notes.append)
    assert tracker.sinks == [] and len(notes) == 1
    assert "tensorboard is not installed" in notes[0] and "\n" not in notes[0]
    tracker.row(EPOCH)  # a tracker without sinks takes rows and does nothing
    assert log_figures(tmp_path / "tb", {"a": [1.0]}, {}, notes.append) is None and len(notes) == 2
    assert not (tmp_path / "tb").exists()


def test_rows_become_scalars_and_tables(tmp_path):
    tracker = open_tracker(LoggingConfig(), tmp_path, {}, 0, pytest.fail)
    for row in (EPOCH, EVAL, TEST):
        tracker.row(row)
    tracker.close()
    board = scalar_series(tmp_path / "tensorboard")
    assert board["train/loss"] == [1.5] and board["noise_scale/b_simple"] == [42.0]
    assert "noise_scale/trace" not in board  # None is not a figure
    assert board["val_top1/full/r8-k5-e3-d2"] == [75.0] and board["val_loss/full/r6-k3-e2-d1"] == pytest.approx([1.2])
    assert board["test_top1/r8-k5-e3-d2"] == [80.0]


class FakeWandb(SimpleNamespace):
    """The part of wandb a sink uses, recording what it is given."""

    def __init__(self) -> None:
        super().__init__(logged=[], inits=[], finished=False)

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return SimpleNamespace(
            log=lambda values, step: self.logged.append((values, step)), finish=lambda: setattr(self, "finished", True)
        )

    @staticmethod
    def Table(columns, data):
        return ("table", columns, data)


def test_wandb_and_mlflow_get_the_same_figures(tmp_path, monkeypatch):
    wandb, calls = FakeWandb(), []
    mlflow = SimpleNamespace(
        set_experiment=lambda name: calls.append(("experiment", name)),
        start_run=lambda run_name: calls.append(("run", run_name)),
        log_dict=lambda d, name: calls.append(("dict", name)),
        log_metrics=lambda values, step: calls.append(("metrics", values, step)),
        log_table=lambda data, name: calls.append(("table", data, name)),
        end_run=lambda: calls.append(("end",)),
    )
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    monkeypatch.setitem(sys.modules, "mlflow", mlflow)
    cfg = LoggingConfig(tensorboard=False, wandb=True, mlflow=True, project="p")
    tracker = open_tracker(cfg, tmp_path / "run", {"seed": 0}, 0, pytest.fail)
    assert isinstance(tracker, Tracker) and len(tracker.sinks) == 2
    tracker.row(EVAL)
    tracker.row(TEST)
    tracker.close()
    assert wandb.inits[0]["project"] == "p" and wandb.inits[0]["config"] == {"seed": 0} and wandb.finished
    assert ({"val_top1/full/r8-k5-e3-d2": 75.0, "val_top1/full/r6-k3-e2-d1": 50.0}, 10) in wandb.logged
    assert (
        {"test": ("table", ["subnet", "top-1 (%)", "loss"], [["r8-k5-e3-d2", "80.00", "0.5000"]])},
        12,
    ) in wandb.logged
    assert calls[:3] == [("experiment", "p"), ("run", "run"), ("dict", "recipe.json")] and calls[-1] == ("end",)
    assert ("metrics", {"test_top1/r8-k5-e3-d2": 80.0}, 12) in calls
    assert ("table", {"subnet": ["r8-k5-e3-d2"], "top-1 (%)": ["80.00"], "loss": ["0.5000"]}, "test.json") in calls
