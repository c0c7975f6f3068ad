"""The progressive-shrinking trainer end to end on a tiny synthetic recipe, and its pieces."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from helpers import TINY_RECIPE as TINY
from helpers import scalar_series

from ofa.cli import main
from ofa.data.datasets import data_from_meta
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.train import load_recipe, train
from ofa.train.checkpoint import CheckpointStore
from ofa.train.optim import build_optimizer, lr_at
from ofa.train.sampling import eval_subnets, step_subnets
from ofa.utils.errors import OFAError


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "run"
    assert main(["train", str(TINY), "--out", str(out)]) == 0
    return out


def _rows(out: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


def test_run_folder_holds_recipe_metrics_plot_checkpoints_and_supernet(run):
    recipe = load_recipe(TINY)
    assert load_recipe(run / "recipe.yaml") == recipe  # the resolved recipe reproduces the run
    epochs = _rows(run, "epoch")
    assert [(r["phase"], r["epoch"]) for r in epochs] == [("full", 1), ("full", 2), ("depth", 1), ("expand", 1)]
    assert all(math.isfinite(r["loss"]) and r["lr"] > 0 for r in epochs)
    assert [r["phase"] for r in _rows(run, "eval")] == ["full", "depth", "expand"]
    assert [r["phase"] for r in _rows(run, "phase")] == ["full", "depth", "expand"]
    assert (run / "training_curves.png").read_bytes()[:4] == b"\x89PNG"
    ckpts = CheckpointStore(run / "checkpoints").paths()
    assert len(ckpts) == 2  # keep: 2
    # Every checkpoint and the final file load as a supernet, with the data's metadata.
    for path in (ckpts[-1], run / "supernet.pt"):
        net = OFAMobileNetV3.load(path)
        for key in ("recipe", "data", "mean", "std", "class_names", "image_size", "in_channels", "seed"):
            assert key in net.meta, key
        assert net.meta["recipe"] == recipe.to_dict() and net.meta["image_size"] == 8
    bundle = data_from_meta(OFAMobileNetV3.load(run / "supernet.pt").meta)
    assert bundle.num_classes == 4 and len(bundle.test) == 64


def test_noise_scale_is_logged_and_subnets_learn(run):
    epochs = _rows(run, "epoch")
    assert all(r["noise_scale"]["updates"] > 0 for r in epochs)  # micro_batches: 2
    test = _rows(run, "test")[0]
    assert set(test["subnets"]) == {test["largest"]["name"], test["smallest"]["name"]}
    assert test["largest"]["top1"] >= 60 and test["smallest"]["top1"] >= 40  # chance is 25%
    meta = OFAMobileNetV3.load(run / "supernet.pt").meta
    assert meta["test"][test["largest"]["name"]] == test["largest"]["top1"]


def test_teacher_and_reorganized_channels_survive_in_checkpoints(run):
    state = torch.load(CheckpointStore(run / "checkpoints").paths()[-1], weights_only=True)
    assert state["format"] == "ofa-checkpoint" and state["teacher"] is not None
    assert (state["phase"], state["epoch"], state["step"]) == (3, 0, 0)  # past the last phase
    teacher = OFAMobileNetV3(load_recipe(TINY).space)
    teacher.load_state_dict(state["teacher"])
    net = OFAMobileNetV3.load(run / "supernet.pt")
    assert not torch.equal(teacher.classifier.weight, net.classifier.weight)  # frozen after phase 1


def test_tensorboard_holds_every_phases_corner_accuracy_loss_lr_noise_and_test(run):
    recipe = load_recipe(TINY)
    board = scalar_series(run / "tensorboard")  # read back with tensorboard's own event reader
    for row in _rows(run, "eval"):
        phase = recipe.phases[row["phase_index"]]
        corners = eval_subnets(recipe.space, phase, recipe.eval.subnets)
        assert set(row["subnets"]) == set(corners)
        for name in corners:
            assert board[f"val_top1/{phase.name}/{name}"] == pytest.approx([row["subnets"][name]["top1"]])
    epochs = _rows(run, "epoch")
    assert board["train/loss"] == pytest.approx([r["loss"] for r in epochs])
    assert board["train/lr"] == pytest.approx([r["lr"] for r in epochs])
    assert board["noise_scale/updates"] == [r["noise_scale"]["updates"] for r in epochs]
    assert len(board["train/step_loss"]) == epochs[-1]["step"]
    test = _rows(run, "test")[0]
    assert {f"test_top1/{n}": [v["top1"]] for n, v in test["subnets"].items()} == {
        k: pytest.approx(v) for k, v in board.items() if k.startswith("test_top1/")
    }


def test_refuses_to_overwrite_a_run(run):
    with pytest.raises(OFAError, match="already holds a training run; pass --resume"):
        train(load_recipe(TINY), run)


def test_a_run_folder_that_cannot_be_created_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for out, reason in ((blocker / "run", "cannot create the run folder"), (blocker, "is a file")):
        assert main(["train", str(TINY), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"ofa train: error: {out}: {reason}")


def test_sampling_is_seeded_and_respects_the_phase():
    r = load_recipe(TINY)
    space, depth, expand = r.space, r.phases[1], r.phases[2]
    a = step_subnets(space, depth, False, 0, 1, 0, 5)
    assert a == step_subnets(space, depth, False, 0, 1, 0, 5) and len(a) == 2
    assert len({x.resolution for x in a}) == 1
    draws = [x for s in range(30) for x in step_subnets(space, depth, False, 0, 1, 0, s)]
    assert {e for x in draws for e in x.expands} == {3} and {k for x in draws for k in x.kernels} == {3, 5}
    assert {d for x in draws for d in x.depths} == {1, 2} and {x.resolution for x in draws} == {6, 8}
    sandwich = step_subnets(space, expand, False, 0, 2, 0, 0)
    res = sandwich[0].resolution
    assert sandwich == [expand.largest(res, space), expand.smallest(res, space)]
    # BigNAS's corners: the largest at the largest resolution, the smallest at the smallest, the random subnets
    # drawn as without (one stream)
    three = dataclasses.replace(expand, subnets_per_step=3)
    cornered = dataclasses.replace(three, corner_resolutions=True)
    for step in range(6):
        placed, drawn = (
            step_subnets(space, cornered, False, 0, 2, 0, step),
            step_subnets(space, three, False, 0, 2, 0, step),
        )
        assert placed[:2] == [expand.largest(8, space), expand.smallest(6, space)] and placed[2] == drawn[2]
    inplace = step_subnets(space, depth, True, 0, 1, 0, 0)
    assert inplace[0] == depth.largest(inplace[0].resolution, space)  # the in-place teacher comes first
    corners = eval_subnets(space, expand, "corners")
    assert len(corners) == 16 and "r8-k5-e3-d2" in corners and "r6-k3-e2-d1" in corners
    assert len(eval_subnets(space, r.phases[0], "corners")) == 2  # fixed k/e/d: only the resolutions vary
    assert list(eval_subnets(space, expand, "minmax")) == ["r8-k5-e3-d2", "r6-k3-e2-d1"]


def test_lr_schedule_and_weight_decay_groups():
    r = load_recipe(TINY, ["phases.depth.warmup_epochs=2", "phases.depth.epochs=4"])
    phase = r.phases[1]
    lrs = [lr_at(s, 10, phase, r.schedule) for s in range(60)]
    assert lrs[0] == pytest.approx(0.05 / 20) and lrs[19] == pytest.approx(0.05)  # linear warmup
    assert lrs[20] == pytest.approx(0.05) and lrs[40] == pytest.approx(0.025) and lrs[59] < 1e-3  # cosine
    assert lr_at(3, 10, phase, r.schedule, scale=4.0) == pytest.approx(4 * lrs[3])
    net = OFAMobileNetV3(r.space)
    decay, no_decay = build_optimizer(net, r.optimizer, 0.1).param_groups
    assert decay["weight_decay"] == r.optimizer.weight_decay and no_decay["weight_decay"] == 0
    assert any(p is net.bn1.weight for p in no_decay["params"]) and all(p.ndim > 1 for p in decay["params"])
    assert (
        build_optimizer(net, load_recipe(TINY, ["optimizer.name=adamw"]).optimizer, 0.1).__class__.__name__ == "AdamW"
    )


def test_inplace_distillation_adamw_clipping_and_periodic_eval(tmp_path):
    recipe = load_recipe(
        TINY,
        [
            "distill.teacher=inplace",
            "optimizer.name=adamw",
            "phases.full.lr=0.01",
            "phases.depth.lr=0.005",
            "phases.expand.lr=0.005",
            "phases.expand.epochs=2",
            "phases.expand.corner_resolutions=true",  # the teacher at 8 px teaches the smallest subnet at 6
            "optimizer.grad_clip=0.5",
            "eval.every=1",
            "schedule.micro_batches=1",
            "checkpoint.every_steps=0",
            "checkpoint.safetensors=true",
            "logging.tensorboard=false",
        ],
    )
    path = train(recipe, tmp_path / "run")
    meta_recipe = OFAMobileNetV3.load(path).meta["recipe"]
    assert meta_recipe["distill"]["teacher"] == "inplace" and meta_recipe["phases"][2]["corner_resolutions"]
    assert "corner_resolutions" not in meta_recipe["phases"][1]  # at its default: digests of older runs kept
    same, torch_file = OFAMobileNetV3.load(path.with_suffix(".safetensors")), OFAMobileNetV3.load(path)
    assert same.meta == torch_file.meta  # on request, the same supernet without pickle
    assert all(torch.equal(a, b) for a, b in zip(same.state_dict().values(), torch_file.state_dict().values()))
    assert not (tmp_path / "run" / "tensorboard").exists()
    epochs = _rows(tmp_path / "run", "epoch")
    assert all(r["noise_scale"] is None for r in epochs)  # one micro-batch, one process: nothing to compare
    assert all(math.isfinite(r["loss"]) for r in epochs)
    assert len(_rows(tmp_path / "run", "eval")) == len(epochs) == 5  # every epoch, not only at phase ends


def test_divergence_stops_with_a_clear_message_and_keeps_the_last_checkpoint(tmp_path):
    recipe = load_recipe(TINY, ["phases.depth.lr=1e30", "checkpoint.every_steps=0"])
    with pytest.raises(OFAError) as err:
        train(recipe, tmp_path / "run")
    message = str(err.value)
    assert "loss became" in message and "phase 'depth'" in message and "phases[1].lr" in message
    last = CheckpointStore(tmp_path / "run" / "checkpoints").paths()[-1]
    assert str(last) in message
    state = torch.load(last, weights_only=True)
    assert (state["phase"], state["epoch"]) == (1, 0)  # end of phase "full": intact
    assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())
