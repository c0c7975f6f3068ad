"""What a progressive-shrinking run costs against the largest twin's, measured on this machine in one process.

A cached run records the CPU seconds of whichever machine and hour trained it: this repository's runs
span an AMD EPYC and an Intel Xeon about 3x slower, on hosts whose speed changed within the hour, so the
quotient of two records is no cost ratio. This times both sides here, in rounds: each round trains a
slice of the recipe (every phase for two epochs of ``STEPS`` steps at most, on a ``train_subset`` of that
many batches) and of the largest twin (two epochs likewise), the sides in alternating order. A phase's CPU
seconds per step, and the twin's, are the median over rounds of their second epochs (the first holds
the set-up); the ratio scales them to the full runs' step counts:

    ratio = sum over phases (epochs x steps per epoch x CPU s per step)
            / (the twin's epochs x steps per epoch x its CPU s per step)

Training steps only: evaluation and BN recalibration, which both sides also do, are left out. Kept per
recipe, twin and CPU in the bench's cache (``cost-KEY.json``), so a report on another machine measures again.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
from pathlib import Path

from bench import ps_runs
from ofa.data.datasets import DataBundle, build_data
from ofa.families.family import Arch
from ofa.train import train
from ofa.train.plots import read_metrics
from ofa.train.recipe import Recipe, recipe_from_dict
from ofa.utils.machine import cpu_name

ROUNDS, STEPS = 3, 12
SLICE_EPOCHS = 2  # the second epoch is the one timed


def slice_recipe(recipe: Recipe, steps: int) -> Recipe:
    """The recipe with every phase cut to two epochs (no warm-up) of ``steps`` steps; its images are a
    ``train_subset`` of ``steps`` batches (validation still carved outside it, as in the full run)."""
    raw = recipe.to_dict()
    raw["data"] = {**raw["data"], "train_subset": steps * recipe.data.batch_size}
    raw["phases"] = [{**p, "epochs": SLICE_EPOCHS, "warmup_epochs": 0} for p in raw["phases"]]
    raw["checkpoint"] = {**raw["checkpoint"], "every_steps": 0}
    raw["logging"] = {**raw.get("logging", {}), "tensorboard": False}
    return recipe_from_dict(raw, f"{recipe.source} (cost slice)")


def _step_cpu(metrics: Path) -> list[tuple[str | None, float]]:
    """(phase, CPU seconds per step) of each timed epoch in a run's ``metrics.jsonl``: each phase's (or the
    run's) second epoch, its steps counted from the epoch row before it."""
    epochs = [r for r in read_metrics(metrics) if r.get("kind") == "epoch"]
    return [
        (r.get("phase"), r["cpu_s"] / (r["step"] - before["step"]))
        for before, r in itertools.pairwise(epochs)
        if r["epoch"] == SLICE_EPOCHS
    ]


def ps_step_cpu(sliced: Recipe, folder: Path) -> dict[str, float]:
    """CPU seconds per training step of each phase of a `slice_recipe`, trained into ``folder``."""
    train(sliced, folder)
    return dict(_step_cpu(folder / "metrics.jsonl"))


def twin_step_cpu(sliced: Recipe, data: DataBundle, arch: Arch, lr: float, folder: Path) -> float:
    """CPU seconds per training step of ``arch`` trained alone on a `slice_recipe`'s ``data``, into ``folder``."""
    run = ps_runs.ScratchRun(arch, lr, SLICE_EPOCHS, seed=0)
    ps_runs.train_from_scratch(sliced, run, data, "cost slice, twin", folder)
    ((_, per_step),) = _step_cpu(folder / "metrics.jsonl")
    return per_step


def measure(recipe: Recipe, twin: tuple[Arch, float, int], steps_per_epoch: int, rounds: int = ROUNDS) -> dict:
    """The cost ratio of ``recipe``'s run to ``twin`` (arch, lr, epochs), measured here; see the module doc."""
    arch, lr, twin_epochs = twin
    steps = min(STEPS, steps_per_epoch)  # a slice of no more batches than the run has
    sliced = slice_recipe(recipe, steps)
    data = build_data(sliced.data)  # the twin's slices share one (a PS slice's `train` builds its own)
    ps_rounds: list[dict[str, float]] = []
    twin_rounds: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ps-cost-") as tmp:
        for i in range(rounds):
            sides = [
                lambda i=i: ps_rounds.append(ps_step_cpu(sliced, Path(tmp) / f"ps-{i}")),
                lambda i=i: twin_rounds.append(twin_step_cpu(sliced, data, arch, lr, Path(tmp) / f"twin-{i}")),
            ]
            for side in sides if i % 2 == 0 else sides[::-1]:
                side()
    phases = {
        p.name: {
            "epochs": p.total_epochs,
            "cpu_s_per_step": statistics.median(r[p.name] for r in ps_rounds),
            "rounds": [r[p.name] for r in ps_rounds],
        }
        for p in recipe.phases
    }
    per_step = statistics.median(twin_rounds)
    ps_cpu = sum(v["epochs"] * steps_per_epoch * v["cpu_s_per_step"] for v in phases.values())
    twin_cpu = twin_epochs * steps_per_epoch * per_step
    return {
        "cpu": cpu_name(),
        "steps_per_epoch": steps_per_epoch,
        "slice_steps": steps,
        "phases": phases,
        "twin": {"epochs": twin_epochs, "lr": lr, "cpu_s_per_step": per_step, "rounds": twin_rounds},
        "ps_cpu_seconds": ps_cpu,
        "twin_cpu_seconds": twin_cpu,
        "ratio": ps_cpu / twin_cpu,
    }


def cost_path(
    cache: Path, recipe: Recipe, twin: tuple[Arch, float, int], steps_per_epoch: int, rounds: int = ROUNDS
) -> Path:
    """Where `cached_measure` keeps its measurement: per recipe, twin, rounds and CPU."""
    arch, lr, epochs = twin
    key = ps_runs.digest(
        [recipe.training_dict(), arch.to_dict(), lr, epochs, steps_per_epoch, STEPS, rounds, cpu_name()]
    )
    return cache / f"cost-{key}.json"


def cached_measure(
    cache: Path, recipe: Recipe, twin: tuple[Arch, float, int], steps_per_epoch: int, rounds: int = ROUNDS
) -> dict:
    """`measure`, kept in ``cache`` (`cost_path`)."""
    path = cost_path(cache, recipe, twin, steps_per_epoch, rounds)
    return ps_runs.cached(path, lambda: measure(recipe, twin, steps_per_epoch, rounds))
