"""Measured critical batch size vs the gradient noise scale B_simple (McCandlish et al. 2018).

For one phase (default: the first, which trains the full network, one subnet per step) the
recipe's trainer trains from the same starting weights to a fixed target at each batch size of a
sweep, with a small grid of constant learning rates per batch size (the best of them counts),
and records the optimizer steps S and examples E = B·S to the target. Each batch size starts with
the rate factor that was best at the previous one; a later rate stops once it has taken as many steps
as the best so far, since it can no longer win (the best per batch size is the same as without
stopping). The fit S = S_min + E_min/B (`ofa.train.critical_batch`) gives B_crit = E_min/S_min.
B_simple is measured by the trainer's own estimator (`ofa.train.noise_measure`) at the weights where
the reference run (the recipe's batch size, its best learning rate) first reached the target, with
the learning rate at zero.

The target is fixed here, before the sweep: validation cross-entropy of the phase's largest
subnet at its largest resolution, after BN recalibration on a fixed 2 × 128 training images,
checked on a geometric grid of example counts (8% apart). Every run trains micro-batches of
``--micro`` images, so batch normalization sees the same batch at every batch size; the small
batch of B_simple is that micro-batch. In a phase that trains several subnets per step, an
example is one training image (it passes through each of the step's subnets).

    python -m bench.critical_batch RECIPE [--phase NAME --run DIR] [--batches 16 32 ...] [--json]

The ratio B_crit / B_simple carries both uncertainties: the fit's (its covariance) and B_simple's
own standard error over its measurement steps (`ofa.train.noise_scale.b_simple_log_sd`).

Writes bench/data/critical_batch.png or --out (steps vs examples per batch size, the fitted curve, B_crit and
B_simple); prints one JSON object as the last line.

Each finished (batch, rate) run is kept in ``--cache`` (default ``runs/bench/critical_batch/``: its steps, and
the weights where it reached the target), keyed by everything that decides it (the run's recipe, the starting
checkpoint, the target, the limits), so a sweep that was stopped continues where it stopped: a long sweep on
a slow machine can span several sittings. The code is not in the key: a run kept from before a change to
training's numerics (2026-12-06: each micro-batch's dropout masks seeded by its place in the global batch) is a
draw of the same experiment, not what a retrain gives bit for bit. Delete the folder to train every run again.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
from matplotlib.figure import Figure

from bench.common import DATA, ROOT
from bench.ps_runs import digest
from ofa.data.config import missing_dataset
from ofa.data.loaders import make_loader, set_loader_epoch
from ofa.train.bn import CalibrationBatches
from ofa.train.checkpoint import CheckpointStore
from ofa.train.critical_batch import TradeoffFit, fit_tradeoff
from ofa.train.distributed import DistEnv, process_group
from ofa.train.loop import Trainer
from ofa.train.noise_measure import NoiseMeasureConfig, measure_phase_noise
from ofa.train.noise_scale import log_interval
from ofa.train.recipe import Recipe, load_recipe
from ofa.utils.errors import OFAError
from ofa.utils.io import file_sha256, load_torch, read_json, read_yaml, save_torch, write_json

# Per data set (the recipe's data.name), fixed before the sweep: a val loss that every batch size of
# the default sweep reaches with some rate of its grid well inside --max-epochs. Fashion-MNIST's was set
# from one pilot run at batch 512 (its rate x1 of the grid), which crossed it about halfway to 16 epochs.
TARGET_VAL_LOSS = {"digits": 0.35, "fashion_mnist": 0.45}
LR_FACTORS = (0.5, 1.0, 2.0)  # default grid around the recipe's rate scaled by sqrt(B / recipe batch)
CHECK_RATIO = 1.08  # evaluate when the examples seen pass the next point of this geometric grid
GOAL = (0.5, 2.0)  # B_crit / B_simple
DEFAULT_CACHE = ROOT / "runs" / "bench" / "critical_batch"


@dataclass(frozen=True)
class Sweep:
    """What to run: the recipe, the phase and where its weights start, batches, rates, limits."""

    recipe_path: str
    phase: str | None
    run_dir: str | None
    batches: tuple[int, ...]
    micro: int
    target: float
    max_epochs: int
    noise_steps: int
    noise_accumulate: int
    out_png: Path
    lr_factors: tuple[float, ...] = LR_FACTORS
    cache: Path | None = None  # finished runs kept here (None: nothing kept)

    @cached_property
    def start_digest(self) -> str | None:
        """The sha256 of the checkpoint the runs start from (None: the recipe's initial weights), once a sweep."""
        if self.run_dir is None:
            return None
        return file_sha256(CheckpointStore(Path(self.run_dir) / "checkpoints").paths()[-1])

    def __post_init__(self) -> None:
        if not self.lr_factors or min(self.lr_factors) <= 0:
            raise OFAError(f"--lr-factors: need positive factors, got {list(self.lr_factors)}")


@dataclass(frozen=True)
class Run:
    batch: int
    lr: float
    steps: int | None  # None: target not reached (or diverged)
    examples: int | None
    note: str
    cached: bool = False  # read from the sweep's cache, not trained in this invocation


def run_recipe(sweep: Sweep, batch: int, lr: float) -> Recipe:
    """The recipe at one (batch, constant rate) point, with no noise measurement during training."""
    base = load_recipe(sweep.recipe_path)
    name = sweep.phase or base.phases[0].name
    return load_recipe(
        sweep.recipe_path,
        [
            f"data.batch_size={batch}",
            f"schedule.micro_batches={max(1, batch // sweep.micro)}",
            f"phases.{name}.lr={lr}",
            f"phases.{name}.warmup_epochs=0",
            "schedule.lr_schedule=constant",
            "optimizer.lr_reference_batch=null",
            "noise_scale.enabled=false",
            "eval.calib_batches=2",
        ],
    )


def start_state(sweep: Sweep) -> dict | None:
    if sweep.run_dir is None:
        return None
    state = CheckpointStore(Path(sweep.run_dir) / "checkpoints").load_latest()
    if state is None:
        raise OFAError(f"{sweep.run_dir}: no checkpoint to start phase {sweep.phase!r} from")
    return state


def new_trainer(recipe: Recipe, p: int, state: dict | None, env: DistEnv) -> Trainer:
    trainer = Trainer(recipe, None, env)
    if state is not None:
        trainer.load_state(copy.deepcopy(state))
    trainer.begin_phase(p)
    # One calibration set for every batch size, so the target means the same at each.
    calib = make_loader(trainer.session.data.calib, 128, shuffle=True, seed=recipe.seed + 1)
    trainer.session.calib_loader = CalibrationBatches(calib)
    return trainer


def val_loss(trainer: Trainer, p: int) -> float:
    phase, space = trainer.recipe.phases[p], trainer.recipe.space
    arch = phase.largest(max(phase.resolutions), space)
    loss = trainer.evaluate({"largest": arch}, trainer.session.val_loader)["largest"]["loss"]
    trainer.net.train()
    return loss


def train_to_target(
    sweep: Sweep, p: int, state: dict | None, batch: int, lr: float, max_steps: int | None = None
) -> tuple[Run, dict | None]:
    """Steps and examples until the target (checked on the example grid); the weights there.

    A run still short of the target after ``max_steps`` (the best run so far at this batch size)
    stops there: it could no longer be the best, and a slow rate would otherwise train to the limit.
    """
    recipe = run_recipe(sweep, batch, lr)
    with process_group("cpu") as env:
        trainer = new_trainer(recipe, p, state, env)
        if val_loss(trainer, p) <= sweep.target:
            raise OFAError(f"the starting weights already meet the target val loss {sweep.target}: raise the bar")
        next_check, step = float(batch), 0
        for epoch in range(sweep.max_epochs):
            set_loader_epoch(trainer.session.train_loader, trainer.global_epoch(p, epoch))
            trainer.net.train()
            for i, (x, y) in enumerate(trainer.session.train_loader):
                try:
                    trainer.train_step(p, epoch, i, x, y)
                except OFAError:
                    return Run(batch, lr, None, None, "diverged"), None
                step += 1
                if step * batch >= next_check:
                    while next_check <= step * batch:
                        next_check *= CHECK_RATIO
                    if val_loss(trainer, p) <= sweep.target:
                        return Run(batch, lr, step, step * batch, "reached"), copy.deepcopy(trainer.net.state_dict())
                if max_steps is not None and step >= max_steps:
                    return Run(batch, lr, None, None, f"stopped at {step} steps, the best so far"), None
        return Run(batch, lr, None, None, f"not reached in {sweep.max_epochs} epochs"), None


def cached_run(
    sweep: Sweep, p: int, state: dict | None, batch: int, lr: float, max_steps: int | None = None
) -> tuple[Run, dict | None]:
    """`train_to_target`, or its result kept in ``sweep.cache`` by an earlier invocation (training is
    deterministic: the same key trains the same run)."""
    if sweep.cache is None:
        return train_to_target(sweep, p, state, batch, lr, max_steps)
    key = digest(
        {
            "recipe": run_recipe(sweep, batch, lr).training_dict(),
            "phase": p,
            "start": sweep.start_digest,
            "target": sweep.target,
            "max_epochs": sweep.max_epochs,
            "max_steps": max_steps,
            "check_ratio": CHECK_RATIO,
        }
    )
    record, weights_file = sweep.cache / f"run-{key}.json", sweep.cache / f"run-{key}.pt"
    if record.is_file():
        kept = read_json(record, "cached critical-batch run")
        weights = load_torch(weights_file, "cached run weights")["state_dict"] if kept["steps"] else None
        return Run(batch, lr, kept["steps"], kept["examples"], kept["note"], cached=True), weights
    run, weights = train_to_target(sweep, p, state, batch, lr, max_steps)
    if weights is not None:  # first: the record says the run is finished
        save_torch(weights_file, {"state_dict": weights})
    write_json(record, {"batch": batch, "lr": lr, "steps": run.steps, "examples": run.examples, "note": run.note})
    return run, weights


def measure_b_simple(sweep: Sweep, p: int, state: dict | None, ref: Run, weights: dict) -> dict:
    """B_simple at ``weights`` with the reference run's micro-batches (learning rate zero)."""
    recipe = run_recipe(sweep, ref.batch, ref.lr)
    with process_group("cpu") as env:
        trainer = new_trainer(recipe, p, state, env)
        trainer.net.load_state_dict(weights)
        result = measure_phase_noise(trainer, p, NoiseMeasureConfig(sweep.noise_steps, sweep.noise_accumulate))
    return result.to_dict()


def plot(path: Path, best: list[Run], others: list[Run], fit: TradeoffFit, b_simple: float | None) -> None:
    fig = Figure(figsize=(6.4, 4.8))
    ax = fig.add_subplot()
    ax.scatter([r.examples for r in others], [r.steps for r in others], c="0.75", s=14, label="other rates")
    ax.scatter([r.examples for r in best], [r.steps for r in best], c="C0", zorder=3, label="best rate per batch")
    for r in best:
        ax.annotate(f"B={r.batch}", (r.examples, r.steps), textcoords="offset points", xytext=(5, 4), fontsize=8)
    lo, hi = min(r.batch for r in best) / 4, max(r.batch for r in best) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(
        [b * fit.steps(b) for b in grid],
        [fit.steps(b) for b in grid],
        "C1-",
        label=f"fit: S_min={fit.s_min:.0f}, E_min={fit.e_min:.0f}",
    )
    ax.axhline(fit.s_min, color="C1", ls=":", lw=0.8)
    ax.axvline(fit.e_min, color="C1", ls=":", lw=0.8)
    ax.plot([2 * fit.e_min], [2 * fit.s_min], "C3*", ms=14, label=f"B_crit ≈ {fit.b_crit:.0f}")
    if b_simple:
        ax.plot(
            [b_simple * fit.steps(b_simple)],
            [fit.steps(b_simple)],
            "C2D",
            ms=9,
            label=f"B_simple ≈ {b_simple:.0f} (on the fit)",
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="examples to target E",
        ylabel="optimizer steps to target S",
        title="steps vs examples to a fixed target",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def sweep_runs(
    sweep: Sweep, p: int, state: dict | None, ref_batch: int, base_lr: float
) -> tuple[list[Run], dict[int, Run], dict]:
    """Every (batch, rate) run, the best run per batch size, and the reference batch's weights per rate.

    Each batch size tries first the factor that was best at the previous one, then the others by
    distance from it, so that later runs can stop at the best run's steps (ties keep the first)."""
    runs, best, ref_weights, anchor = [], {}, {}, 1.0
    for batch in sweep.batches:
        for f in sorted(sweep.lr_factors, key=lambda f: abs(math.log(f / anchor))):
            lr = round(base_lr * math.sqrt(batch / ref_batch) * f, 5)
            leader = best.get(batch)
            run, weights = cached_run(sweep, p, state, batch, lr, leader.steps if leader else None)
            if run.steps is not None and (leader is None or run.steps < leader.steps):
                best[batch], anchor = run, f
            print(
                f"batch {batch:5d} lr {lr:<8g} {run.note}"
                + (f": {run.steps} steps, {run.examples} examples" if run.steps else "")
                + (" (cached)" if run.cached else ""),
                file=sys.stderr,
                flush=True,
            )
            runs.append(run)
            if batch == ref_batch and weights is not None:
                ref_weights[lr] = weights
    return runs, best, ref_weights


def main_sweep(sweep: Sweep) -> dict:
    torch.set_num_threads(1)
    start = time.perf_counter()
    recipe = load_recipe(sweep.recipe_path)
    p = recipe.phase_index(sweep.phase) if sweep.phase else 0
    if p > 0 and sweep.run_dir is None:
        raise OFAError(f"--phase {sweep.phase}: later phases start from trained weights; give --run DIR")
    state = start_state(sweep)
    ref_batch = recipe.data.batch_size
    if ref_batch not in sweep.batches:
        raise OFAError(f"--batches must include the recipe's batch size {ref_batch} (the reference run)")
    runs, best, ref_weights = sweep_runs(sweep, p, state, ref_batch, recipe.phases[p].lr)
    missing = [b for b in sweep.batches if b not in best]
    if missing or ref_batch not in best:
        raise OFAError(f"target val loss {sweep.target} not reached at batch size(s) {missing}: no fit")
    chosen = [best[b] for b in sweep.batches]
    fit = fit_tradeoff([r.steps for r in chosen], [r.examples for r in chosen])
    noise = measure_b_simple(sweep, p, state, best[ref_batch], ref_weights[best[ref_batch].lr])
    plot(sweep.out_png, chosen, [r for r in runs if r.steps is not None and r not in chosen], fit, noise["b_simple"])
    return report(sweep, recipe, p, runs, chosen, fit, noise, time.perf_counter() - start)


def grid_edge_batches(runs: list[Run], chosen: list[Run]) -> list[int]:
    """Batch sizes whose best rate is the lowest or highest of their grid: the grid may not bracket the
    optimum there, and a better rate outside it would change that batch's steps (and so B_crit)."""
    edges = []
    for best in chosen:
        rates = [r.lr for r in runs if r.batch == best.batch]
        if len(rates) > 1 and best.lr in (min(rates), max(rates)):
            edges.append(best.batch)
    return edges


def _sig(x: float | None, digits: int = 3) -> float | None:
    """``x`` to ``digits`` significant figures (None and inf as they are)."""
    return x if x is None or not math.isfinite(x) or x == 0 else round(x, digits - 1 - math.floor(math.log10(abs(x))))


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def report(
    sweep: Sweep,
    recipe: Recipe,
    p: int,
    runs: list[Run],
    chosen: list[Run],
    fit: TradeoffFit,
    noise: dict,
    seconds: float,
) -> dict:
    b_simple = noise["b_simple"]
    ref = next(r for r in chosen if r.batch == recipe.data.batch_size)
    ratio = fit.b_crit / b_simple if b_simple else None
    low, high = fit.interval()
    # ln(B_crit / B_simple): the fit's and the B_simple measurement's errors, independent, add in quadrature.
    b_sd = noise["b_simple_log_sd"]
    ratio_sd = math.hypot(fit.log_sd, b_sd) if ratio and b_sd is not None and math.isfinite(fit.log_sd) else None
    ratio_low, ratio_high = log_interval(ratio, ratio_sd) if ratio_sd is not None else (None, None)
    return {
        "recipe": sweep.recipe_path,
        "phase": recipe.phases[p].name,
        "target": f"val loss <= {sweep.target} (largest subnet, largest resolution)",
        "examples_are": f"training images, each through the step's {recipe.phases[p].subnets_per_step} subnet(s)",
        "micro_batch": sweep.micro,
        "runs_are": "[batch, lr, steps to target (null: not reached, or stopped at the batch size's best steps)]",
        "lr_grid": "recipe lr x sqrt(B / recipe batch) x " + str(list(sweep.lr_factors)),
        "runs": [[r.batch, r.lr, r.steps] for r in sorted(runs, key=lambda r: (r.batch, r.lr))],
        "best_lr": {r.batch: r.lr for r in chosen},
        "best_lr_at_grid_edge": grid_edge_batches(runs, chosen),
        "s_min": _sig(fit.s_min),
        "e_min": _sig(fit.e_min),
        "b_crit": _sig(fit.b_crit),
        "b_crit_log_sd": _sig(fit.log_sd),
        "b_crit_low": _sig(low),
        "b_crit_high": _sig(high),
        "b_simple": _sig(b_simple),
        "b_simple_log_sd": _sig(b_sd),
        "b_simple_at": f"reference run (batch {ref.batch}, lr {ref.lr}) at the target",
        "b_simple_measure": {k: _sig(noise[k]) for k in ("steps", "b_small", "b_big", "trace_sigma", "grad_sq")},
        "ratio": _sig(ratio),
        "ratio_log_sd": _sig(ratio_sd),
        "ratio_low": _sig(ratio_low),
        "ratio_high": _sig(ratio_high),
        "in_goal": bool(ratio and GOAL[0] <= ratio <= GOAL[1]),
        "png": _shown(sweep.out_png),
        "runs_cached": sum(r.cached for r in runs),  # trained by an earlier invocation: not in ``seconds``
        "seconds": round(seconds, 1),
    }


def default_target(recipe_path: str) -> float:
    """The fixed target of the recipe's data set (``TARGET_VAL_LOSS``)."""
    name = load_recipe(recipe_path).data.name
    if name not in TARGET_VAL_LOSS:
        raise OFAError(f"no fixed target for data set {name!r} (have {', '.join(TARGET_VAL_LOSS)}): give --target")
    return TARGET_VAL_LOSS[name]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", nargs="?", default=str(ROOT / "recipes" / "digits.yaml"))
    ap.add_argument("--phase", help="phase to measure (default: the first, the full network)")
    ap.add_argument("--run", help="run folder whose newest checkpoint gives the starting weights (later phases)")
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512])
    ap.add_argument(
        "--lr-factors",
        type=float,
        nargs="+",
        default=list(LR_FACTORS),
        help=f"rates tried per batch size, factors of the recipe's rate x sqrt(B / recipe batch) ({list(LR_FACTORS)})",
    )
    ap.add_argument("--micro", type=int, default=16, help="images per micro-batch at every batch size (default 16)")
    ap.add_argument("--target", type=float, help=f"val loss (default: per data set, {TARGET_VAL_LOSS})")
    ap.add_argument("--max-epochs", type=int, default=40)
    ap.add_argument("--noise-steps", type=int, default=30, help="B_simple measurement steps (default 30)")
    ap.add_argument("--noise-accumulate", type=int, default=16, help="micro-batches per measurement step (default 16)")
    ap.add_argument("--out", default=str(DATA / "critical_batch.png"), help="the PNG to write")
    ap.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="folder of finished runs a stopped sweep continues from (default runs/bench/critical_batch)",
    )
    ap.add_argument("--json", action="store_true", help="print only the JSON object")
    return ap.parse_args(argv)


def sweep_of(args: argparse.Namespace) -> Sweep:
    return Sweep(
        args.recipe,
        args.phase,
        args.run,
        tuple(sorted(set(args.batches))),
        args.micro,
        args.target if args.target is not None else default_target(args.recipe),
        args.max_epochs,
        args.noise_steps,
        args.noise_accumulate,
        Path(args.out),
        tuple(args.lr_factors),
        args.cache,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        why = missing_dataset(read_yaml(args.recipe, "recipe").get("data") or {})
        if why:
            print(f"critical_batch: skipped: {why}")
            print(json.dumps({"recipe": args.recipe, "skipped": why}))
            return 0
        result = main_sweep(sweep_of(args))
    except OFAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.json:
        print(
            f"B_crit = {result['b_crit']:.0f} [{result['b_crit_low']:.0f}, {result['b_crit_high']:.0f}] (68%), "
            f"B_simple = {result['b_simple']:.0f}, ratio {result['ratio']:.2g}; figure {result['png']}"
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
