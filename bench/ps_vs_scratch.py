"""Progressive shrinking vs training from scratch, every choice made on the validation split.

One side trains the supernet with the recipe (once per seed) and evaluates subnets taken from it
(after BN recalibration, no retraining) on the validation and the test split. The other trains each
subnet alone as an ordinary timm network (the recipe's optimizer, batch size and augmentation, the
first phase's warmup, cosine schedule, no distillation). Every decision follows a rule of
`bench.ps_rules`, fixed before running and applied to validation figures only: the lr grid at E
epochs (the first seed; extended while its best is at an edge, flagged if it still is), the
convergence ladder E, 2E, ... (every seed; a doubling gains only if its mean validation gain exceeds
max(0.3, 2 x its standard error); the doubling after the stop runs as a sensitivity row), and the
twin each PS subnet is judged against (the epoch count of its ladder with the best validation mean).
The test split is read for the final table only. Subnets: the smallest, the middle (median MACs of
seeded samples), the largest and ``--random`` more drawn by ``--subnet-seed``. Cost: CPU seconds of
training steps, the PS recipe's against the largest twin's at its converged epoch count, both measured on
this machine in one process (`bench.ps_cost`): each run's own process CPU (and wall) seconds are cached
with it and shown, but cached runs come from other machines and hours.

Every finished run (`bench.ps_runs`) is cached as JSON under ``--cache`` by a digest of what determines it (the
resolved recipe and seed for a supernet; the space, data, optimizer, subnet, lr, epochs and seed
for a scratch run), so an interrupted or extended benchmark reruns nothing it has; a supernet run
and a scratch run also resume from their last checkpoint (a scratch run's, at an epoch's end, lives in
``scratch-KEY/`` beside its record until the record is written). The pending runs are what the rules
ask for given the cache (``--plan`` lists them with their epochs, and each twin's validation figures so
far, read with them); ``--worker i/n`` shares them between n processes (see `bench.ps_jobs`), each planning again after
every run. A recipe whose data is missing is skipped.

    python -m bench.ps_vs_scratch [--recipe digits|fashion|PATH] [--seeds 0 1] [--scratch-epochs N]
        [--random 5] [--subnet-seed 0] [--lr-factors 0.5 1 2] [--set KEY=VALUE ...]
        [--worker i/n] [--threads 1] [--plan] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench import ps_cost
from bench import ps_rules as rules
from bench.common import DATA, ROOT
from bench.ps_jobs import Job, Plan, parse_worker, plan_text, work
from bench.ps_runs import SPLITS, ScratchRun, ps_eval_path, ps_run, recipe_digest, scratch_record, scratch_run
from ofa.data.config import missing_dataset
from ofa.data.datasets import DataBundle, build_data
from ofa.families.family import Arch, Space
from ofa.families.registry import family_of
from ofa.train import Recipe
from ofa.train.recipe import recipe_from_dict
from ofa.utils.config import apply_overrides
from ofa.utils.errors import OFAError
from ofa.utils.io import read_json, read_yaml

RECIPES = {"digits": ROOT / "recipes" / "digits.yaml", "fashion": ROOT / "recipes" / "fashion_mnist.yaml"}
# Finished runs' records (JSON, metrics, recipe) are kept in the repository: the full benchmark takes
# hours of CPU, so a clone reports from them and only trains what is missing (--cache DIR starts afresh).
DEFAULT_CACHE = DATA / "ps_runs"
RULES = {k: getattr(rules, k) for k in ("GAIN_FLOOR", "SE_MULTIPLE", "LR_EXTENSIONS", "TARGET_POINTS", "BUDGET_RATIO")}


@dataclass(frozen=True)
class BenchConfig:
    """What one benchmark invocation compares."""

    recipe: str = "digits"
    overrides: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0, 1)
    scratch_epochs: int | None = None  # E; None: the recipe's total epochs
    scratch_lr: float | None = None  # centre of the lr grid; None: the first phase's lr
    random_subnets: int = 5
    subnet_seed: int = 0
    lr_factors: tuple[float, ...] = rules.LR_FACTORS
    lr_extensions: int = rules.LR_EXTENSIONS
    doublings: int = rules.MAX_DOUBLINGS  # 0: no convergence ladder (twins at E only)
    one_seed_after: int | None = None  # ladder levels past this many epochs run the first seed only
    cache: Path = DEFAULT_CACHE
    side: str = "both"  # "ps" or "scratch": run one side's pending runs only
    threads: int | None = None  # torch threads of this process; None: torch's default
    only: tuple[str, ...] = ()  # twins of these subnets only (smallest, middle, largest, random_N); () all
    worker: tuple[int, int] = (0, 1)  # (i, n): worker i of n processes sharing the pending runs
    cost_rounds: int = ps_cost.ROUNDS  # rounds of the cost ratio's slices (`bench.ps_cost`)


def missing_data(recipe_path: Path, overrides: tuple[str, ...]) -> str | None:
    """Why the recipe's data is not on this machine (one line), or None."""
    raw = apply_overrides(dict(read_yaml(recipe_path, "recipe")), overrides, str(recipe_path))
    return missing_dataset(raw.get("data") or {})


def bench_subnets(space: Space, seed: int, n_random: int, candidates: int = 1000) -> dict[str, Arch]:
    """Smallest, middle (median MACs of ``candidates`` seeded samples), largest, then ``n_random`` random ones."""
    rng = np.random.default_rng(seed)
    sample_arch = family_of(space).sample_arch
    pool = sorted((sample_arch(space, rng) for _ in range(candidates)), key=space.macs)
    named = {"smallest": space.min_arch(), "middle": pool[len(pool) // 2], "largest": space.max_arch()}
    rng = np.random.default_rng([seed, 1])
    named.update({f"random_{i + 1}": sample_arch(space, rng) for i in range(n_random)})
    return named


# ------------------------------------------------------------------------------ the rules on the cache
class Bench:
    """One benchmark's recipe, subnets and cache; the data are built on first use (a plan reads only records)."""

    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg
        self.path = RECIPES.get(cfg.recipe, Path(cfg.recipe))
        raw = apply_overrides(dict(read_yaml(self.path, "recipe")), cfg.overrides, str(self.path))
        self.recipe = recipe_from_dict(raw, str(self.path))
        self.subnets = bench_subnets(self.recipe.space, cfg.subnet_seed, cfg.random_subnets)
        unknown = sorted(set(cfg.only) - set(self.subnets))
        if unknown:
            raise OFAError(f"--subnets: unknown {', '.join(unknown)} (have {', '.join(self.subnets)})")
        if cfg.side == "both" and cfg.only and "largest" not in cfg.only:
            raise OFAError("--subnets: the full report needs 'largest' (the cost budget is its scratch run)")
        self.twins = {n: self.subnets[n] for n in cfg.only} if cfg.only else self.subnets
        self.epochs = cfg.scratch_epochs or sum(p.total_epochs for p in self.recipe.phases)
        self.base_lr = cfg.scratch_lr or self.recipe.phases[0].lr
        try:
            rules.check_one_seed_after(cfg.one_seed_after, self.epochs)
        except ValueError as exc:
            raise OFAError(str(exc)) from None

    @cached_property
    def data(self) -> DataBundle:
        return build_data(self.recipe.data)

    @property
    def steps_per_epoch(self) -> int:
        """Training steps in one epoch (whole batches)."""
        return len(self.data.train) // self.recipe.data.batch_size

    def seed_recipe(self, seed: int) -> Recipe:
        return dataclasses.replace(self.recipe, seed=seed)


@dataclass(frozen=True)
class TwinState:
    """A twin's pending runs and what waits on them, or (everything decided) its summary; ``known``: its
    validation figures so far, for `--plan`."""

    pending: tuple[ScratchRun, ...]
    waiting: str | None
    summary: dict[str, Any] | None
    known: str = ""
    spent: dict[str, float] = dataclasses.field(default_factory=dict)  # CPU seconds of its finished runs, by key


def _grid(b: Bench, arch: Arch) -> tuple[rules.GridState, dict[float, dict[str, Any]]]:
    """The lr grid's state from the cache, and the records it read (factor -> record): factors found are fed to
    the rule until it asks for one not run."""
    records: dict[float, dict[str, Any]] = {}
    while True:
        grid = rules.lr_grid({f: r["val_top1"] for f, r in records.items()}, b.cfg.lr_factors, b.cfg.lr_extensions)
        runs = {f: ScratchRun(arch, b.base_lr * f, b.epochs, b.cfg.seeds[0]) for f in grid.pending}
        found = {f: r for f, run in runs.items() if (r := scratch_record(b.recipe, run, b.cfg.cache))}
        if not found:
            return grid, records
        records.update(found)


def _ladder(b: Bench, arch: Arch, lr: float) -> tuple[rules.Ladder, dict[int, dict[int, dict[str, Any]]]]:
    """The ladder's state from the cache, and the records it read (epochs -> seed -> record)."""
    records: dict[int, dict[int, dict[str, Any]]] = {}
    while True:
        val = {e: [r["val_top1"] for r in by_seed.values()] for e, by_seed in records.items()}
        state = rules.ladder(b.epochs, val, len(b.cfg.seeds), b.cfg.doublings, b.cfg.one_seed_after)
        new = [e for e in state.levels if e not in records]
        if not new:
            return state, records
        for e in new:
            found = {s: scratch_record(b.recipe, ScratchRun(arch, lr, e, s), b.cfg.cache) for s in b.cfg.seeds}
            records[e] = {s: r for s, r in found.items() if r is not None}


def _level(by_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    runs = list(by_seed.values())
    out = {f"{split}_top1": statistics.mean(r[f"{split}_top1"] for r in runs) for split in SPLITS}
    out.update({f"{split}_seeds": [r[f"{split}_top1"] for r in runs] for split in SPLITS})
    out.update({k: statistics.mean(r[k] for r in runs) for k in ("cpu_seconds", "seconds")})
    return out


def _known(b: Bench, name: str, grid: rules.GridState, records: dict[int, dict[int, dict[str, Any]]]) -> str:
    """A twin's lr grid's validation top-1 and each ladder level's seed mean so far: validation only, as every
    choice is made on it."""
    parts = [f"lr grid {', '.join(f'{b.base_lr * f:g}: {v:.2f}' for f, v in sorted(grid.val.items()))}"]
    parts += [
        f"{e} epochs {statistics.mean(r['val_top1'] for r in by_seed.values()):.2f} ({len(by_seed)} seed"
        f"{'s' if len(by_seed) > 1 else ''})"
        for e, by_seed in sorted(records.items())
        if by_seed
    ]
    return f"{name} (validation top-1): {'; '.join(parts)}"


def _spent(grid: dict[float, dict[str, Any]], ladder: dict[int, dict[int, dict[str, Any]]]) -> dict[str, float]:
    """CPU seconds of each finished run a twin's rules read, by run key (the grid's run at the chosen lr is also
    the ladder's first level: counted once)."""
    runs = [*grid.values(), *(r for by_seed in ladder.values() for r in by_seed.values())]
    return {r["key"]: r["cpu_seconds"] for r in runs}


def twin_state(b: Bench, name: str, arch: Arch) -> TwinState:
    """What the rules ask of one twin given the cache: its lr grid, then its ladder, then its summary."""
    grid, grid_records = _grid(b, arch)
    if grid.pending:
        runs = tuple(ScratchRun(arch, b.base_lr * f, b.epochs, b.cfg.seeds[0]) for f in grid.pending)
        waiting = f"{name}: its lr, then its ladder, wait on the lr grid"
        return TwinState(runs, waiting, None, _known(b, name, grid, {}), _spent(grid_records, {}))
    lr = b.base_lr * grid.best
    state, records = _ladder(b, arch, lr)
    known, spent = _known(b, name, grid, records), _spent(grid_records, records)
    if state.pending:
        need = {e: b.cfg.seeds[: rules.seeds_at(e, len(b.cfg.seeds), b.cfg.one_seed_after)] for e in state.pending}
        runs = tuple(ScratchRun(arch, lr, e, s) for e in state.pending for s in need[e] if s not in records.get(e, {}))
        waiting = f"{name}: the ladder waits on {', '.join(map(str, state.pending))} epochs"
        return TwinState(runs, waiting, None, known, spent)
    levels = {e: _level(records[e]) for e in state.levels}
    val = {e: level["val_seeds"] for e, level in levels.items()}
    best = rules.best_level(val, list(levels))
    summary = {
        "lr": lr,
        "lr_at_edge": grid.at_edge,
        "grid": {f"{b.base_lr * f:g}": v for f, v in grid.val.items()},
        "epochs": b.epochs,
        "levels": {str(e): level for e, level in levels.items()},
        "gains": [{**dataclasses.asdict(g), "gains": g.gains} for g in state.gains],
        "converged_epochs": state.converged_epochs,
        "converged": state.converged_epochs is not None,
        "sensitivity": dataclasses.asdict(state.sensitivity) if state.sensitivity else None,
        "best_epochs": best,
        "bar_val": levels[best]["val_top1"],
        "bar_test": levels[best]["test_top1"],
        "train_images": records[b.epochs][b.cfg.seeds[0]]["train_images"],
    }
    return TwinState((), None, summary, known, spent)


def budget_basis(twin: dict[str, Any]) -> dict[str, Any]:
    """The largest twin's cost the budget divides by: its seed mean at the converged epoch count (the
    longest run where the ladder never converged, a lower bound; E where there was no ladder)."""
    epochs = twin["converged_epochs"] or max(map(int, twin["levels"]))
    level = twin["levels"][str(epochs)]
    return {"epochs": epochs, "seconds": level["seconds"], "cpu_seconds": level["cpu_seconds"]}


# ------------------------------------------------------------------------------ pending runs
def _cpu_per_epoch(b: Bench) -> dict[str, float]:
    """CPU seconds per epoch and training image of each network cached so far (for the plan's estimates)."""
    rates: dict[str, list[float]] = {}
    for path in b.cfg.cache.glob("scratch-*.json"):
        r = read_json(path, "cached benchmark run")
        rates.setdefault(json.dumps(r["arch"], sort_keys=True), []).append(r["cpu_seconds"] / r["train_images"])
    return {k: statistics.mean(v) for k, v in rates.items()}


def scratch_job(b: Bench, name: str, run: ScratchRun, rates: dict[str, float]) -> Job:
    desc = f"scratch {name} lr {run.lr:g} {run.epochs} epochs seed {run.seed}"
    rate = rates.get(json.dumps(run.arch.to_dict(), sort_keys=True))
    per_epoch = b.steps_per_epoch * b.recipe.data.batch_size
    return Job(
        f"scratch-{run.key(b.recipe)}",
        "scratch",
        desc,
        run.epochs,
        run.epochs,
        partial(scratch_run, b.recipe, run, b.data, b.cfg.cache, desc),
        rate * per_epoch * run.epochs if rate else None,
    )


def ps_job(b: Bench, seed: int) -> Job:
    recipe = b.seed_recipe(seed)
    key = recipe_digest(recipe)
    return Job(
        ps_eval_path(b.cfg.cache, key, b.subnets).parent.name + "-" + ps_eval_path(b.cfg.cache, key, b.subnets).stem,
        "ps",
        f"PS seed {seed}",
        sum(p.total_epochs for p in recipe.phases),
        sum(p.total_epochs * p.subnets_per_step for p in recipe.phases),
        lambda: ps_run(recipe, b.subnets, b.data, b.cfg.cache),
    )


def plan(b: Bench) -> Plan:
    """The runs the rules ask for now (twins first, the supernets last), the decisions that wait, and what both
    sides' finished runs hold so far (whichever side runs)."""
    jobs: dict[str, Job] = {}
    waiting, known, spent = [], [], {}
    scratch = b.cfg.side in ("both", "scratch")
    rates = _cpu_per_epoch(b) if scratch else {}  # every cached record read: only for the jobs' estimates
    for name, arch in b.twins.items():
        state = twin_state(b, name, arch)
        if scratch:
            for run in state.pending:
                job = scratch_job(b, name, run, rates)
                jobs.setdefault(job.id, job)
            waiting += [state.waiting] if state.waiting else []
        known.append(state.known)
        spent |= state.spent
    for seed in b.cfg.seeds:
        path = ps_eval_path(b.cfg.cache, recipe_digest(b.seed_recipe(seed)), b.subnets)
        if path.is_file():
            spent[path.parent.name] = read_json(path, "cached benchmark run")["cpu_seconds"]
        elif b.cfg.side in ("both", "ps"):
            job = ps_job(b, seed)
            jobs[job.id] = job
    known.append(f"finished so far: {len(spent)} runs, {sum(spent.values()) / 3600:.2f} CPU-h")
    return Plan(tuple(jobs.values()), tuple(waiting), tuple(known))


# ------------------------------------------------------------------------------ the comparison
def report(b: Bench) -> dict[str, Any]:
    """The final table from the cache (every run it needs is there): validation and test, cost in CPU seconds."""
    ps = [ps_run(b.seed_recipe(s), b.subnets, b.data, b.cfg.cache) for s in b.cfg.seeds]
    rows = {}
    for name, arch in b.twins.items():
        twin = twin_state(b, name, arch).summary
        row = {f"ps_{split}_seeds": [r[f"{split}_top1"][name] for r in ps] for split in SPLITS}
        row.update({f"ps_{split}": statistics.mean(row[f"ps_{split}_seeds"]) for split in SPLITS})
        rows[name] = {
            "arch": arch.to_dict(),
            "macs": b.recipe.space.macs(arch),
            "params": b.recipe.space.params(arch),
            **row,
            "twin": twin,
            "delta_val": row["ps_val"] - twin["bar_val"],
            "delta_test": row["ps_test"] - twin["bar_test"],
        }
    ps_cpu, ps_wall = (statistics.mean(r[k] for r in ps) for k in ("cpu_seconds", "seconds"))
    basis = budget_basis(rows["largest"]["twin"])
    return {
        "recipe": str(b.path),
        "recipe_digest": recipe_digest(b.recipe),
        "seeds": list(b.cfg.seeds),
        "one_seed_after": b.cfg.one_seed_after,
        "subnet_seed": b.cfg.subnet_seed,
        "train_images": len(b.data.train),
        "val_images": len(b.data.val),
        "test_images": len(b.data.test),
        "ps_cpu_seconds": ps_cpu,
        "ps_seconds": ps_wall,
        "ps_train_images": ps[0]["train_images"],
        "budget_basis": basis,
        "recorded_cpu_ratio": ps_cpu / basis["cpu_seconds"],
        "recorded_wall_ratio": ps_wall / basis["seconds"],
        "subnets": rows,
        "within_target": all(r["delta_test"] >= -rules.TARGET_POINTS for r in rows.values()),
        "within_target_val": all(r["delta_val"] >= -rules.TARGET_POINTS for r in rows.values()),
        "scratch_converged": all(r["twin"]["converged"] for r in rows.values()),
        "lr_at_edge": [n for n, r in rows.items() if r["twin"]["lr_at_edge"]],
        "rules": {**RULES, "doublings": b.cfg.doublings, "lr_factors": list(b.cfg.lr_factors)},
    }


def cost_twin(b: Bench, largest: dict[str, Any]) -> tuple[Arch, float, int]:
    """What a cost ratio divides by: the largest twin (its summary) as (arch, lr, converged epoch count)."""
    return b.subnets["largest"], largest["lr"], budget_basis(largest)["epochs"]


def with_cost(b: Bench, r: dict[str, Any]) -> dict[str, Any]:
    """The report with the cost ratio measured on this machine (`bench.ps_cost`): the PS recipe's steps
    against the largest twin's at its converged epoch count (its lr), which decides the budget."""
    largest = cost_twin(b, r["subnets"]["largest"]["twin"])
    cost = ps_cost.cached_measure(b.cfg.cache, b.recipe, largest, b.steps_per_epoch, b.cfg.cost_rounds)
    return {**r, "cost": cost, "cpu_ratio": cost["ratio"], "within_budget": cost["ratio"] <= rules.BUDGET_RATIO}


def one_seed_text(epochs: int | None) -> str:
    return "" if epochs is None else f" (the first only past {epochs} epochs)"


def print_report(r: dict[str, Any]) -> None:
    print(
        f"{r['recipe']}: {r['train_images']} train / {r['val_images']} validation / {r['test_images']} test images, "
        f"seeds {r['seeds']}{one_seed_text(r.get('one_seed_after'))}; choices on validation, test read for this table"
    )
    print(
        f"{'subnet':<9} {'MMACs':>6} {'PS val':>6} {'PS test':>7} {'lr':>7} {'conv.':>5} {'twin@':>5} "
        f"{'tw val':>6} {'tw test':>7} {'Δval':>6} {'Δtest':>6}"
    )
    for name, row in r["subnets"].items():
        t = row["twin"]
        lr = f"{t['lr']:.3g}{'!' if t['lr_at_edge'] else ''}"
        conv = str(t["converged_epochs"] or "no")
        print(
            f"{name:<9} {row['macs'] / 1e6:>6.2f} {row['ps_val']:>6.2f} {row['ps_test']:>7.2f} {lr:>7} {conv:>5} "
            f"{t['best_epochs']:>5} {t['bar_val']:>6.2f} {t['bar_test']:>7.2f} {row['delta_val']:>+6.2f} "
            f"{row['delta_test']:>+6.2f}"
        )
        print(f"          ladder: {rules.ladder_text(t)}")
    basis, cost = r["budget_basis"], r["cost"]
    print(
        f"cost measured here ({cost['cpu']}): PS {cost['ps_cpu_seconds']:.0f} CPU s of steps, largest twin at "
        f"{basis['epochs']} epochs {cost['twin_cpu_seconds']:.0f}: ratio {r['cpu_ratio']:.2f} (budget "
        f"{rules.BUDGET_RATIO:g}): {'within' if r['within_budget'] else 'OVER'}; as recorded (other machines and "
        f"hours): PS {r['ps_cpu_seconds']:.0f} CPU s ({r['ps_seconds']:.0f} wall s), {r['ps_train_images']:,} "
        f"subnet-images, twin {basis['cpu_seconds']:.0f} CPU s, ratio {r['recorded_cpu_ratio']:.2f}"
    )
    print(
        f"every PS subnet within {rules.TARGET_POINTS} points of its best twin or better (test): "
        f"{'yes' if r['within_target'] else 'no'}; twins converged: {'yes' if r['scratch_converged'] else 'no'}"
        + (f"; lr still at a grid edge (!): {', '.join(r['lr_at_edge'])}" if r["lr_at_edge"] else "")
    )


def parse_args(argv: list[str] | None) -> tuple[BenchConfig, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="digits", help="digits, fashion, or a recipe path")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe value")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--scratch-epochs", type=int, help="E, epochs of the twins' grid (default: the recipe's total)")
    p.add_argument("--random", type=int, default=5, help="random subnets besides smallest/middle/largest")
    p.add_argument("--subnet-seed", type=int, default=0, help="seed that draws the middle and random subnets")
    p.add_argument("--scratch-lr", type=float, help="centre of the scratch lr grid (default: the first phase's lr)")
    p.add_argument("--lr-factors", type=float, nargs="+", default=list(rules.LR_FACTORS))
    p.add_argument("--lr-extensions", type=int, default=rules.LR_EXTENSIONS, help="most grid extensions a side")
    p.add_argument("--doublings", type=int, default=rules.MAX_DOUBLINGS, help="most doublings of the ladder")
    p.add_argument("--no-convergence", action="store_true", help="no convergence ladder (--doublings 0)")
    p.add_argument(
        "--one-seed-after", type=int, metavar="EPOCHS", help="ladder levels past EPOCHS run the first seed only"
    )
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="folder of finished runs")
    p.add_argument("--side", choices=["both", "ps", "scratch"], default="both", help="run one side's runs only")
    p.add_argument("--subnets", nargs="+", default=[], help="twins of these only (smallest middle largest random_N)")
    p.add_argument("--worker", default="0/1", metavar="I/N", help="worker I of N processes sharing the runs")
    p.add_argument("--threads", type=int, help="torch threads (e.g. 1 each for two processes on two cores)")
    p.add_argument(
        "--cost-rounds", type=int, default=ps_cost.ROUNDS, help="rounds of the cost ratio's timed slices (>= 1)"
    )
    p.add_argument("--plan", action="store_true", help="print the pending runs and what waits, run nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    a = p.parse_args(argv)
    doublings = 0 if a.no_convergence else a.doublings
    if (a.scratch_epochs is not None and a.scratch_epochs < 2) or min(a.random, doublings, a.lr_extensions) < 0:
        p.error("need --scratch-epochs >= 2 and --random, --doublings, --lr-extensions >= 0")
    if a.cost_rounds < 1:
        p.error("--cost-rounds: need at least 1")
    if len(set(a.seeds)) != len(a.seeds) or (doublings and len(a.seeds) < rules.MIN_SEEDS):
        p.error(f"need distinct seeds, >= {rules.MIN_SEEDS} of them for the ladder (or --no-convergence)")
    try:
        rules.check_one_seed_after(a.one_seed_after, a.scratch_epochs or 2)  # the recipe's E: checked by Bench
        worker = parse_worker(a.worker)
    except ValueError as exc:
        p.error(str(exc))
    cfg = BenchConfig(
        recipe=a.recipe,
        overrides=tuple(a.set),
        seeds=tuple(a.seeds),
        scratch_epochs=a.scratch_epochs,
        scratch_lr=a.scratch_lr,
        random_subnets=a.random,
        subnet_seed=a.subnet_seed,
        lr_factors=tuple(a.lr_factors),
        lr_extensions=a.lr_extensions,
        doublings=doublings,
        one_seed_after=a.one_seed_after,
        cache=a.cache,
        side=a.side,
        threads=a.threads,
        only=tuple(a.subnets),
        worker=worker,
        cost_rounds=a.cost_rounds,
    )
    return cfg, a


def main(argv: list[str] | None = None) -> int:
    cfg, a = parse_args(argv)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        why = missing_data(RECIPES.get(cfg.recipe, Path(cfg.recipe)), cfg.overrides)
        if why:
            print(f"ps_vs_scratch: skipped: {why}")
            if a.json:
                print(json.dumps({"recipe": cfg.recipe, "skipped": why}))
            return 0
        b = Bench(cfg)
        claims = cfg.cache / "claims"
        if a.plan:
            print("\n".join(plan_text(plan(b), claims)))
            return 0
        cfg.cache.mkdir(parents=True, exist_ok=True)
        work(partial(plan, b), claims, *cfg.worker)
        if cfg.side != "both":
            print(f"ps_vs_scratch: {cfg.side} side: no run pending")
            if a.json:
                print(json.dumps({"side": cfg.side, "pending": 0}))
            return 0
        result = with_cost(b, report(b))
    except OFAError as exc:
        print(f"ps_vs_scratch: error: {exc}", file=sys.stderr)
        return 2
    print_report(result)
    if a.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
