"""Data-parallel training: torchrun with 2 gloo processes on CPU matches one process with the same
global batch (cut into 2 micro-batches), weight for weight; and the pipeline under torchrun shards the
collection and leaves the rest to rank 0.

Both tests read one `ofa pipeline` run under torchrun (its train stage is the same `train` on every rank):
each torchrun launch pays three interpreter starts, so the module launches one."""

from __future__ import annotations

import json
import os
import pickle
import queue
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import FAST, resnet_after_a_small_step
from helpers import TINY_RECIPE as TINY
from torch.multiprocessing.spawn import ProcessException

from ofa.cli import main
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.lut.build import TableBuildConfig, build_table
from ofa.train import launch, load_recipe, train
from ofa.train.distributed import DistEnv, average_gradients
from ofa.train.launch import split_batch, train_processes
from ofa.utils.errors import OFAError

# Dropout on (each micro-batch's masks are seeded by its place in the global batch, not by the process that
# runs it), and a short schedule: full network, then the sandwich phase with channel reorganization and the
# teacher. One resolution and a smaller training split (4 steps of the global batch 16 per epoch) keep it quick.
COMMON = [
    "space.dropout=0.3",
    "space.resolutions=[8]",
    "data.synthetic.train_size=72",
    "phases.full.epochs=1",
    "phases.depth.epochs=1",
    "checkpoint.every_steps=0",
]
DIST = ["data.batch_size=8", "schedule.micro_batches=1"]  # per rank: 2 ranks x 8 = the global batch 16
SINGLE = [*COMMON, "data.batch_size=16", "schedule.micro_batches=2"]  # one process: the global batch in 2 halves


@pytest.fixture(scope="module")
def single_process_run(tmp_path_factory) -> Path:
    """The run folder of one process training the global batch, which each way of starting ranks must match."""
    out = tmp_path_factory.mktemp("single") / "run"
    train(load_recipe(TINY, SINGLE), out)
    return out


@pytest.fixture(scope="module")
def torchrun_pipeline(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`ofa pipeline` under torchrun with 2 gloo processes: its run folder and the finished process."""
    tmp = tmp_path_factory.mktemp("torchrun")
    space = load_recipe(TINY, COMMON).space  # dropout is part of the space a table is measured for
    table = tmp / "table.yaml"
    build_table(space, TableBuildConfig(table, protocol=FAST, calibrate=0, max_noise_pct=100.0, progress=False))
    out = tmp / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp)}  # torchrun leaves its log folders in TMPDIR
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "ofa",
        "pipeline",
        str(TINY),
        "--out",
        str(out),
        "--subnets",
        "12",
        "--lut",
        str(table),
        "--targets-ms",
        "1000",
        *[a for o in [*COMMON, *DIST] for a in ("--set", o)],
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def trained_weights(checkpoint: dict) -> list[str]:
    """The names of a supernet file's trained floating-point tensors (not BN running statistics)."""
    return [k for k, v in checkpoint["state_dict"].items() if v.is_floating_point() and "running_" not in k]


def weight_difference(a: dict, b: dict) -> float:
    """The largest difference between two supernet files' trained weights."""
    return max((a["state_dict"][k] - b["state_dict"][k]).abs().max().item() for k in trained_weights(b))


def test_two_gloo_ranks_match_one_process_with_the_same_global_batch(torchrun_pipeline, single_process_run):
    dist_out, _ = torchrun_pipeline
    single = single_process_run / "supernet.pt"

    a = torch.load(dist_out / "supernet.pt", weights_only=True)
    b = torch.load(single, weights_only=True)
    params = trained_weights(b)
    assert len(params) > 50
    worst = weight_difference(a, b)
    torch.manual_seed(0)  # the recipe's seed: the initial weights
    init = OFAMobileNetV3(load_recipe(TINY, COMMON).space).state_dict()
    moved = max((b["state_dict"][k] - init[k]).abs().max().item() for k in params)
    assert worst < 1e-5, f"largest weight difference {worst}"
    assert moved > 1e-2  # the comparison is not vacuous: training moved the weights a lot more than that

    rows = [json.loads(line) for line in (dist_out / "metrics.jsonl").read_text().splitlines()]
    ref = [json.loads(line) for line in (single_process_run / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in rows if r["kind"] == "epoch"]
    ref_epochs = [r for r in ref if r["kind"] == "epoch"]
    assert len(epochs) == 3  # the three phases, one epoch each
    assert [r["step"] for r in epochs] == [r["step"] for r in ref_epochs]  # same number of global steps
    for got, want in zip(epochs, ref_epochs):
        assert abs(got["loss"] - want["loss"]) < 1e-4
        # per-rank vs per-micro-batch gradients: the same two batch sizes, the same estimate
        assert got["noise_scale"]["updates"] == want["noise_scale"]["updates"] > 0
    assert a["meta"]["recipe"]["data"]["batch_size"] == 8


def test_pipeline_under_torchrun_shards_collection_and_leaves_the_rest_to_rank_0(torchrun_pipeline):
    out, proc = torchrun_pipeline
    log = proc.stdout
    assert log.count("[train] running") == 2 and log.count("[collect] running") == 2  # every rank
    assert log.count("[fit] running") == 1 and log.count("[search] running") == 1  # rank 0 alone
    assert log.count("running") == 2 + 2 + 1 + 1 + 1  # + one export
    _header, *subnets = (out / "acc.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["index"] for line in subnets) == list(range(12))  # both ranks' shares, merged
    assert not list(out.glob("acc.jsonl.rank*"))
    state = json.loads((out / "pipeline.json").read_text())
    assert set(state) == {"train", "collect", "fit", "search", "export arch_1000ms"}
    assert (out / "export" / "arch_1000ms.onnx").is_file() and (out / "summary.md").is_file()


def train_two_ranks(recipe: Path, overrides: list[str], out: Path) -> None:
    """`train_processes` with 2 ranks, started from a fresh interpreter as from the CLI (forked, one thread each,
    as from a 2-core machine)."""
    start = "import sys; from ofa.train import load_recipe; from ofa.train.launch import train_processes; "
    start += "train_processes(load_recipe(sys.argv[1], sys.argv[3:]), sys.argv[2], 2)"
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    command = [sys.executable, "-c", start, str(recipe), str(out), *overrides]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_train_processes_starts_ranks_that_train_what_one_process_trains(single_process_run, tmp_path):
    """`train_processes` (the pipeline's ``train_processes``, no torchrun): 2 ranks (forked), each with half the
    batch and half the micro-batches, end with one process's weights.

    The ranks start from a fresh interpreter, as from the CLI: this worker may hold another thread by now (importing
    openvino starts its telemetry's), and then they would be spawned, seconds of imports each; and a child forked
    from a process that ran backward cannot run autograd."""
    recipe = load_recipe(TINY, SINGLE)
    train_two_ranks(TINY, SINGLE, tmp_path / "ranks")
    ranks = torch.load(tmp_path / "ranks" / "supernet.pt", weights_only=True)
    single = torch.load(single_process_run / "supernet.pt", weights_only=True)
    worst = weight_difference(ranks, single)
    assert worst < 1e-5, f"largest weight difference {worst}"
    assert ranks["meta"]["recipe"]["data"]["batch_size"] == 8  # each rank's share
    with pytest.raises(OFAError, match="already holds a training run"):  # refused before any rank starts
        train_processes(recipe, tmp_path / "ranks", 2)


def test_ranks_fork_on_one_thread_each_and_spawn_otherwise(tmp_path, monkeypatch):
    """A rank on one thread, from a process with no other thread, is forked (this process's modules, no imports
    again); several threads per rank, another thread here, or CUDA in use, spawn, which pickles the rank's
    arguments: they must pickle."""
    starts: list[str] = []
    start = lambda fn, args, nprocs, start_method: starts.append(start_method)  # noqa: E731
    monkeypatch.setattr(launch.mp, "start_processes", start)
    recipe = load_recipe(TINY, COMMON)
    for threads, other_threads, cuda in ((2, 1, False), (4, 1, False), (2, 2, False), (2, 1, True)):
        monkeypatch.setattr(torch, "get_num_threads", lambda threads=threads: threads)  # shared by 2 ranks
        monkeypatch.setattr(launch.threading, "active_count", lambda n=other_threads: n)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda cuda=cuda: cuda)
        train_processes(recipe, tmp_path / f"run{len(starts)}", 2)
    assert starts == ["fork", "spawn", "spawn", "spawn"]
    per_rank = split_batch(recipe, 2)
    assert pickle.loads(pickle.dumps(per_rank)) == per_rank


def test_a_ranks_error_reaches_the_caller_as_its_one_line(tmp_path, monkeypatch):
    """A rank puts its `OFAError` in the queue and exits 2; `train_processes` raises that line (here without
    spawning: the rank's function runs in this process, and the start of the ranks fails as it would)."""
    recipe = load_recipe(TINY, COMMON)
    held = tmp_path / "held"
    held.mkdir()
    (held / "supernet.pt").write_bytes(b"")
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the rank sets its rendezvous variables
    errors: queue.SimpleQueue = queue.SimpleQueue()
    with pytest.raises(SystemExit) as exited:
        launch._rank(0, 1, 0, recipe, str(held), False, torch.get_num_threads(), errors)
    assert exited.value.code == 2 and "already holds a training run" in errors.get_nowait()

    lines = ["a rank's error"]

    def failed_start(rank_fn, args, nprocs, start_method):  # a rank's line in the queue (if any), then its exit
        for line in lines:
            args[-1].put(line)
        raise ProcessException("process 1 terminated with exit code 2", 1, 4321)

    monkeypatch.setattr(launch.mp, "start_processes", failed_start)
    with pytest.raises(OFAError, match=r"^a rank's error$"):
        train_processes(recipe, tmp_path / "new", 2)
    lines.clear()  # a rank that died without a line: its exit code
    with pytest.raises(OFAError, match=r"^a training process failed: process 1 terminated with exit code 2$"):
        train_processes(recipe, tmp_path / "new", 2)


def test_train_processes_must_divide_the_batch_and_the_micro_batches(tmp_path, capsys):
    # tiny.yaml: batch 16 in 2 micro-batches; 4 processes cannot share 2 micro-batches: one line, nothing trained
    assert main(["pipeline", str(TINY), "--out", str(tmp_path / "run"), "--train-processes", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pipeline.train_processes / --train-processes: 4 processes must divide" in err and "\n" not in err
    assert not (tmp_path / "run" / "checkpoints").exists()
    halves = split_batch(load_recipe(TINY, ["data.batch_size=16", "schedule.micro_batches=4"]), 2)
    assert (halves.data.batch_size, halves.schedule.micro_batches) == (8, 2)


def test_resnet_ranks_updating_what_they_used_match_one_process(tmp_path):
    """The ResNet family's own gradient path (corner gradients in kept buffers, which the all-reduce writes into
    in place) with ``optimizer.update: used``, in a phase without the sandwich rule, where that rule differs from
    torch's SGD: every rank must update the same regions as one process does.

    Three steps: one process adds the step's gradients one after another where the ranks add their sums, which
    rounds differently, and this tiny ResNet (batches of 8 at 8 px: 128 values per BN channel at the last stage)
    drifts apart from one process after a few more steps, as those differences flip activations across ReLU."""
    recipe = Path(__file__).resolve().parent / "recipes" / "tiny_resnet.yaml"
    phase = (
        "phases=[{name: depth, depths: [0, 1], expands: [0.25, 0.35], widths: [0, 1], subnets_per_step: 2, "
        "epochs: 1, lr: 0.05}]"
    )
    single = [phase, "data.synthetic.train_size=48", "checkpoint.every_steps=0", "data.batch_size=16"]
    single += ["schedule.micro_batches=2", "optimizer.update=used"]
    train(load_recipe(recipe, single), tmp_path / "single")
    train(load_recipe(recipe, [*single, "optimizer.update=all"]), tmp_path / "all")
    train_two_ranks(recipe, single, tmp_path / "ranks")
    ranks, one, paper = (
        torch.load(tmp_path / d / "supernet.pt", weights_only=True) for d in ("ranks", "single", "all")
    )
    assert ranks["meta"]["recipe"]["optimizer"]["update"] == "used"
    worst = weight_difference(ranks, one)
    assert worst < 1e-5, f"largest weight difference {worst}"
    assert weight_difference(paper, one) > 1e-3  # not vacuous: the paper's rule trains other weights here


def test_the_average_over_ranks_carries_only_the_corners_a_resnet_step_wrote(monkeypatch):
    net = resnet_after_a_small_step()[0]
    params = [p for p in net.parameters() if p.grad is not None]
    halves = [p.grad / 2 for p in params]
    sent: list[int] = []
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda t: sent.append(t.numel()))  # the other rank: zeros
    average_gradients(params, DistEnv(0, 2, 0, torch.device("cpu")))
    assert all(torch.equal(p.grad, half) for p, half in zip(params, halves))
    weight = net.stem.conv3.conv.weight  # the smallest subnet writes a corner of it
    buffer = weight.grad.corner_buffer
    assert buffer.dirty < tuple(weight.shape[:2])
    assert sent[0] < sum(p.numel() for p in params) / 2  # mostly corners
    assert not buffer.written_elsewhere()  # still tracked: its next step clears only its corner
