"""Progressive shrinking vs training from scratch: test top-1 and cost of the same subnets, both ways.

One side trains the supernet with the recipe (once per seed) and evaluates subnets taken from it
(after BN recalibration, no retraining). The other trains each subnet alone as an ordinary timm
network (the recipe's optimizer, batch size and augmentation, the first phase's warmup, cosine
schedule, no distillation): a learning-rate grid (the first phase's lr times each factor) on the
first seed picks the best on the validation split, the other seeds reuse it, and runs at twice
the epochs check that the baseline has converged (a doubling gains at most ``CONVERGED_POINTS``;
while it gains more, the epochs double again, up to ``--doublings`` times). Each PS subnet is
judged against its best twin: the seed mean at E or any longer run, whichever is higher. Subnets: the
smallest, the middle (median MACs of seeded samples), the largest and ``--random`` more drawn by
``--subnet-seed``. Cost: wall seconds and training images (subnet forward/backward passes x images).

Every finished run is cached as JSON under ``--cache`` by a digest of what determines it (the
resolved recipe and seed for a supernet; the space, data, optimizer, subnet, lr, epochs and seed
for a scratch run), so an interrupted or extended benchmark reruns nothing it has; a supernet run
also resumes from its last checkpoint. A recipe whose data is missing is skipped with one line.

    python -m bench.ps_vs_scratch [--recipe digits|fashion|PATH] [--seeds 0 1] [--scratch-epochs N]
        [--random 5] [--subnet-seed 0] [--lr-factors 0.5 1 2] [--set KEY=VALUE ...] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import statistics
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bench.common import DATA, ROOT
from ofa.data.config import missing_dataset
from ofa.data.datasets import DataBundle, build_data
from ofa.data.loaders import make_loader, set_loader_epoch
from ofa.families.family import Arch, Space
from ofa.families.registry import family_of, load_supernet
from ofa.train import Recipe, train
from ofa.train.bn import resize
from ofa.train.distributed import DistEnv
from ofa.train.evaluate import evaluate, evaluate_arch
from ofa.train.recipe import PhaseConfig, recipe_from_dict
from ofa.train.session import SessionConfig, TrainingSession, apply_gradients
from ofa.utils.config import apply_overrides
from ofa.utils.errors import OFAError
from ofa.utils.io import read_json, read_yaml, write_json

RECIPES = {"digits": ROOT / "recipes" / "digits.yaml", "fashion": ROOT / "recipes" / "fashion_mnist.yaml"}
TARGET_POINTS = 0.5  # every PS subnet within this of its from-scratch twin, or better
CONVERGED_POINTS = 0.3  # scratch top-1 at 2x epochs within this of top-1 at 1x: converged
BUDGET_RATIO = 4.0  # PS wall seconds <= this x the largest subnet's scratch run at its converged epochs
# Finished runs' records (JSON, metrics, recipe) are kept in the repository: the full benchmark takes
# hours of CPU, so a clone reports from them and only trains what is missing (--cache DIR starts afresh).
DEFAULT_CACHE = DATA / "ps_runs"


@dataclass(frozen=True)
class BenchConfig:
    """What one benchmark invocation compares."""

    recipe: str = "digits"
    overrides: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0, 1)
    scratch_epochs: int | None = None  # None: the recipe's total epochs
    scratch_lr: float | None = None  # centre of the lr grid; None: the first phase's lr
    random_subnets: int = 5
    subnet_seed: int = 0
    lr_factors: tuple[float, ...] = (0.5, 1.0, 2.0)
    doublings: int = 2  # convergence check: E -> 2E (-> 4E ... while a doubling gains more); 0 skips it
    cache: Path = DEFAULT_CACHE
    side: str = "both"  # "ps" or "scratch": fill the cache with one side only (e.g. in two processes)
    threads: int | None = None  # torch threads of this process; None: torch's default
    only: tuple[str, ...] = ()  # bench only these of the subnets (smallest, middle, largest, random_N); () all


def digest(obj: Any) -> str:
    """Short stable hash of a JSON-able object (the cache key)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


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


def cached(path: Path, compute) -> dict[str, Any]:
    """The JSON at ``path``, or ``compute()`` written there first."""
    if path.is_file():
        return read_json(path, "cached benchmark run")
    result = compute()
    write_json(path, result)
    return result


# ------------------------------------------------------------------------------ progressive shrinking
def ps_images(recipe: Recipe, train_images: int) -> dict[str, int]:
    """Images read and subnet forward/backward passes x images of a whole supernet run."""
    batch = recipe.data.batch_size
    steps = train_images // batch
    read = sum(p.total_epochs for p in recipe.phases) * steps * batch
    passes = sum(p.total_epochs * p.subnets_per_step for p in recipe.phases) * steps * batch
    return {"images_read": read, "train_images": passes}


def ps_run(recipe: Recipe, subnets: dict[str, Arch], data: DataBundle, cache: Path) -> dict[str, Any]:
    """Train (or resume, or reuse) the supernet of ``recipe`` and test every subnet taken from it."""
    key = digest(recipe.training_dict())
    run_dir = cache / f"ps-{key}"

    def compute() -> dict[str, Any]:
        path = run_dir / "supernet.pt" if (run_dir / "supernet.pt").exists() else train(recipe, run_dir, resume=True)
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        final = next(r for r in reversed(rows) if r["kind"] == "test")
        net = load_supernet(path)
        calib = make_loader(data.train, recipe.data.batch_size, shuffle=True, seed=recipe.seed + 1)
        test = make_loader(data.test, recipe.data.eval_batch_size, shuffle=False, seed=0)
        top1 = {}
        for name, arch in subnets.items():
            set_loader_epoch(calib, 0)
            top1[name] = evaluate_arch(net, arch, calib, test, recipe.eval.calib_batches)["top1"]
        return {
            "kind": "ps",
            "seed": recipe.seed,
            "recipe_digest": key,
            "seconds": final["elapsed_s"],
            "cpu_seconds": final.get("cpu_s"),
            "top1": top1,
            **ps_images(recipe, len(data.train)),
            "archs": archs,
        }

    archs = {n: a.to_dict() for n, a in subnets.items()}
    return cached(run_dir / f"eval-{digest(archs)}.json", compute)


# ------------------------------------------------------------------------------ from scratch
@dataclass(frozen=True)
class ScratchRun:
    """One subnet trained alone."""

    arch: Arch
    lr: float
    epochs: int
    seed: int

    def key(self, recipe: Recipe) -> str:
        r = recipe.to_dict()
        return digest(
            {
                "space": r["space"],
                "data": r["data"],
                "optimizer": r["optimizer"],
                "schedule": r["schedule"],
                "warmup": recipe.phases[0].warmup_epochs,
                "arch": self.arch.to_dict(),
                "lr": self.lr,
                "epochs": self.epochs,
                "seed": self.seed,
            }
        )


def train_from_scratch(recipe: Recipe, run: ScratchRun, data: DataBundle, desc: str) -> torch.nn.Module:
    """The static timm subnet trained alone with the recipe's optimizer settings (a session without a run folder)."""
    torch.manual_seed(run.seed)
    model = family_of(recipe.space).build_subnet(recipe.space, run.arch)
    warmup = min(recipe.phases[0].warmup_epochs, run.epochs - 1)
    schedule = PhaseConfig(name="scratch", epochs=run.epochs - warmup, warmup_epochs=warmup, lr=run.lr)
    # The grid's learning rates are used as they are: no scaling by optimizer.lr_reference_batch.
    optim = dataclasses.replace(recipe.optimizer, lr_reference_batch=None)
    session = TrainingSession(
        SessionConfig(recipe.data, optim, run.seed, recipe.source), DistEnv.single_process(), data=data
    )
    optimizer = session.new_optimizer(model, run.lr)

    def step(epoch: int, i: int, x: torch.Tensor, y: torch.Tensor) -> float:
        session.schedule_lr(optimizer, schedule, recipe.schedule, epoch, i)
        logits = model(resize(x, run.arch.resolution))
        loss = F.cross_entropy(logits, y, label_smoothing=recipe.optimizer.label_smoothing)
        apply_gradients(loss, model, optimizer, recipe.optimizer.grad_clip)
        return loss.item()

    model.train()
    for epoch in range(run.epochs):
        session.run_epoch(epoch, f"{desc} {epoch + 1}/{run.epochs}", partial(step, epoch))
        session.next_epoch()
    return model


def scratch_run(recipe: Recipe, run: ScratchRun, data: DataBundle, cache: Path, desc: str) -> dict[str, Any]:
    """Validation and test top-1, seconds and images of one cached from-scratch run."""
    key = run.key(recipe)

    def compute() -> dict[str, Any]:
        start, cpu = time.perf_counter(), time.process_time()
        model = train_from_scratch(recipe, run, data, desc)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        val = make_loader(data.val, recipe.data.eval_batch_size, shuffle=False, seed=0)
        test = make_loader(data.test, recipe.data.eval_batch_size, shuffle=False, seed=0)
        images = run.epochs * (len(data.train) // recipe.data.batch_size) * recipe.data.batch_size
        return {
            "kind": "scratch",
            "key": key,
            "arch": run.arch.to_dict(),
            "lr": run.lr,
            "epochs": run.epochs,
            "seed": run.seed,
            "seconds": seconds,
            "cpu_seconds": cpu,
            "train_images": images,
            "val_top1": evaluate(model, val, run.arch.resolution)["top1"],
            "test_top1": evaluate(model, test, run.arch.resolution)["top1"],
        }

    return cached(cache / f"scratch-{key}.json", compute)


def scratch_twin(recipe: Recipe, name: str, arch: Arch, cfg: BenchConfig, data: DataBundle) -> dict[str, Any]:
    """Best-of-grid learning rate (validation, first seed), every seed at it, and the 2x-epochs check."""
    epochs = cfg.scratch_epochs or sum(p.total_epochs for p in recipe.phases)
    first, base_lr = cfg.seeds[0], cfg.scratch_lr or recipe.phases[0].lr
    grid = [
        scratch_run(
            recipe, ScratchRun(arch, base_lr * f, epochs, first), data, cfg.cache, f"scratch {name} lr {base_lr * f:g}"
        )
        for f in cfg.lr_factors
    ]
    best = max(grid, key=lambda r: r["val_top1"])
    runs = [best] + [
        scratch_run(recipe, ScratchRun(arch, best["lr"], epochs, s), data, cfg.cache, f"scratch {name} seed {s}")
        for s in cfg.seeds[1:]
    ]
    out = {
        "lr": best["lr"],
        "epochs": epochs,
        "grid": {f"{r['lr']:g}": r["val_top1"] for r in grid},
        "test_top1": statistics.mean(r["test_top1"] for r in runs),
        "seeds": [r["test_top1"] for r in runs],
        "seconds": statistics.mean(r["seconds"] for r in runs),
        "cpu_seconds": statistics.mean(r["cpu_seconds"] for r in runs),
        "train_images": best["train_images"],
    }
    if cfg.doublings:
        out.update(convergence_ladder(recipe, name, arch, best, cfg, data))
    out["bar"] = max([out["test_top1"], *out.get("longer", {}).values()])
    return out


def convergence_ladder(
    recipe: Recipe, name: str, arch: Arch, best: dict[str, Any], cfg: BenchConfig, data: DataBundle
) -> dict[str, Any]:
    """Test top-1 of the first seed at 2E, 4E, ... epochs, doubling while a doubling gains > CONVERGED_POINTS."""
    longer, cost, last, epochs = {}, {}, best["test_top1"], best["epochs"]
    for _ in range(cfg.doublings):
        epochs *= 2
        twin = ScratchRun(arch, best["lr"], epochs, cfg.seeds[0])
        run = scratch_run(recipe, twin, data, cfg.cache, f"scratch {name} {epochs} epochs")
        longer[str(epochs)], gain, last = run["test_top1"], run["test_top1"] - last, run["test_top1"]
        cost[str(epochs)] = [run["seconds"], run["cpu_seconds"]]
        if gain <= CONVERGED_POINTS:
            break
    converged = gain <= CONVERGED_POINTS
    return {
        "longer": longer,
        "longer_cost": cost,  # [wall, CPU] seconds per run
        "test_top1_2x": longer[str(2 * best["epochs"])],
        "converged": converged,
        "converged_epochs": epochs // 2 if converged else None,  # doubling from here gained <= CONVERGED_POINTS
    }


def budget_basis(twin: dict[str, Any]) -> dict[str, Any]:
    """The largest twin's run the cost budget divides by: the one at its converged epoch count (the
    longest run when the ladder never converged, a lower bound; E when there was no check)."""
    epochs = twin.get("converged_epochs") or max(map(int, twin.get("longer", {})), default=twin["epochs"])
    if epochs == twin["epochs"]:
        return {"epochs": epochs, "seconds": twin["seconds"], "cpu_seconds": twin["cpu_seconds"]}
    seconds, cpu = twin["longer_cost"][str(epochs)]
    return {"epochs": epochs, "seconds": seconds, "cpu_seconds": cpu}


# ------------------------------------------------------------------------------ the comparison
def load_bench_recipe(cfg: BenchConfig) -> tuple[Path, Recipe]:
    path = RECIPES.get(cfg.recipe, Path(cfg.recipe))
    raw = apply_overrides(dict(read_yaml(path, "recipe")), cfg.overrides, str(path))
    return path, recipe_from_dict(raw, str(path))


def run_one_side(cfg: BenchConfig, recipe: Recipe, data: DataBundle, subnets: dict[str, Arch]) -> dict[str, Any]:
    """Only the PS runs or only the scratch twins (cached for a later full report); their figures."""
    if cfg.side == "ps":
        runs = [ps_run(dataclasses.replace(recipe, seed=s), subnets, data, cfg.cache) for s in cfg.seeds]
        return {"side": "ps", "seconds": [r["seconds"] for r in runs], "top1": [r["top1"] for r in runs]}
    first_pass = dataclasses.replace(cfg, doublings=0)  # every twin at E epochs before any 2E check
    for name, arch in subnets.items():
        scratch_twin(recipe, name, arch, first_pass, data)
    return {"side": "scratch", "twins": {n: scratch_twin(recipe, n, a, cfg, data) for n, a in subnets.items()}}


def run(cfg: BenchConfig) -> dict[str, Any]:
    """Both sides for every subnet and seed; the report (also the JSON line)."""
    path, recipe = load_bench_recipe(cfg)
    cfg.cache.mkdir(parents=True, exist_ok=True)
    data = build_data(recipe.data)
    subnets = bench_subnets(recipe.space, cfg.subnet_seed, cfg.random_subnets)
    unknown = sorted(set(cfg.only) - set(subnets))
    if unknown:
        raise OFAError(f"--subnets: unknown {', '.join(unknown)} (have {', '.join(subnets)})")
    if cfg.side == "both" and cfg.only and "largest" not in cfg.only:
        raise OFAError("--subnets: the full report needs 'largest' (the cost budget is its scratch run)")
    subnets = {n: subnets[n] for n in cfg.only} if cfg.only else subnets
    if cfg.side != "both":
        return run_one_side(cfg, recipe, data, subnets)
    ps = [ps_run(dataclasses.replace(recipe, seed=s), subnets, data, cfg.cache) for s in cfg.seeds]
    rows = {}
    for name, arch in subnets.items():
        twin = scratch_twin(recipe, name, arch, cfg, data)
        ps_top1 = statistics.mean(r["top1"][name] for r in ps)
        rows[name] = {
            "arch": arch.to_dict(),
            "macs": recipe.space.macs(arch),
            "params": recipe.space.params(arch),
            "ps_top1": ps_top1,
            "ps_seeds": [r["top1"][name] for r in ps],
            "scratch": twin,
            "delta": ps_top1 - twin["test_top1"],
            "delta_bar": ps_top1 - twin["bar"],
        }
    ps_seconds = statistics.mean(r["seconds"] for r in ps)
    ps_cpu = statistics.mean(r.get("cpu_seconds") or float("nan") for r in ps)  # nan: resumed from an old checkpoint
    basis = budget_basis(rows["largest"]["scratch"])
    budget = BUDGET_RATIO * basis["seconds"]
    return {
        "recipe": str(path),
        "recipe_digest": ps[0]["recipe_digest"],
        "seeds": list(cfg.seeds),
        "subnet_seed": cfg.subnet_seed,
        "train_images": len(data.train),
        "test_images": len(data.test),
        "ps_seconds": ps_seconds,
        "ps_cpu_seconds": ps_cpu,
        "cpu_ratio": ps_cpu / basis["cpu_seconds"],
        "budget_basis": basis,
        "ps_train_images": ps[0]["train_images"],
        "ps_budget_seconds": budget,
        "within_budget": ps_seconds <= budget,
        "subnets": rows,
        "target_points": TARGET_POINTS,
        "within_target": all(r["delta_bar"] >= -TARGET_POINTS for r in rows.values()),
        "scratch_converged": all(r["scratch"].get("converged", True) for r in rows.values()),
    }


def print_report(report: dict[str, Any]) -> None:
    if "side" in report:
        print(json.dumps(report, indent=1))
        return
    print(
        f"{report['recipe']}: {report['train_images']} train / {report['test_images']} test images, "
        f"seeds {report['seeds']}"
    )
    print(f"{'subnet':<9} {'MMACs':>6} {'PS':>6} {'scratch':>7} {'PS-scr':>6} {'lr':>6} {'longer':>13} {'PS-best':>7}")
    for name, r in report["subnets"].items():
        s = r["scratch"]
        longer = " ".join(f"{v:.2f}@{k}" for k, v in s.get("longer", {}).items()) or "-"
        print(
            f"{name:<9} {r['macs'] / 1e6:>6.2f} {r['ps_top1']:>6.2f} {s['test_top1']:>7.2f} {r['delta']:>+6.2f} "
            f"{s['lr']:>6.3g} {longer:>13} {r['delta_bar']:>+7.2f}"
        )
    print(
        f"PS: {report['ps_seconds']:.0f} s, {report['ps_train_images']:,} subnet-images; budget "
        f"{report['ps_budget_seconds']:.0f} s ({BUDGET_RATIO:g}x the largest subnet's "
        f"{report['budget_basis']['epochs']}-epoch scratch run): "
        f"{'within' if report['within_budget'] else 'OVER'}"
    )
    print(
        f"every PS subnet within {TARGET_POINTS} points of its best scratch twin or better: "
        f"{'yes' if report['within_target'] else 'no'}; scratch converged: "
        f"{'yes' if report['scratch_converged'] else 'no'}"
    )


def parse_args(argv: list[str] | None) -> tuple[BenchConfig, bool]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="digits", help="digits, fashion, or a recipe path")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe value")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--scratch-epochs", type=int, help="epochs of each scratch run (default: the recipe's total)")
    p.add_argument("--random", type=int, default=5, help="random subnets besides smallest/middle/largest")
    p.add_argument("--subnet-seed", type=int, default=0, help="seed that draws the middle and random subnets")
    p.add_argument("--scratch-lr", type=float, help="centre of the scratch lr grid (default: the first phase's lr)")
    p.add_argument("--lr-factors", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    p.add_argument("--doublings", type=int, default=2, help="most epoch doublings of the convergence check")
    p.add_argument("--no-convergence", action="store_true", help="skip the convergence check (--doublings 0)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="folder of finished runs")
    p.add_argument("--side", choices=["both", "ps", "scratch"], default="both", help="run one side only (cached)")
    p.add_argument("--subnets", nargs="+", default=[], help="only these (smallest middle largest random_N), in order")
    p.add_argument("--threads", type=int, help="torch threads (e.g. 1 each for two processes on two cores)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    a = p.parse_args(argv)
    if len(a.seeds) < 1 or (a.scratch_epochs is not None and a.scratch_epochs < 2) or min(a.random, a.doublings) < 0:
        p.error("need at least one seed, --scratch-epochs >= 2, --random >= 0 and --doublings >= 0")
    return BenchConfig(
        recipe=a.recipe,
        overrides=tuple(a.set),
        seeds=tuple(a.seeds),
        scratch_epochs=a.scratch_epochs,
        scratch_lr=a.scratch_lr,
        random_subnets=a.random,
        subnet_seed=a.subnet_seed,
        lr_factors=tuple(a.lr_factors),
        doublings=0 if a.no_convergence else a.doublings,
        cache=a.cache,
        side=a.side,
        threads=a.threads,
        only=tuple(a.subnets),
    ), a.json


def main(argv: list[str] | None = None) -> int:
    cfg, as_json = parse_args(argv)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        why = missing_data(RECIPES.get(cfg.recipe, Path(cfg.recipe)), cfg.overrides)
        if why:
            print(f"ps_vs_scratch: skipped: {why}")
            if as_json:
                print(json.dumps({"recipe": cfg.recipe, "skipped": why}))
            return 0
        report = run(cfg)
    except OFAError as exc:
        print(f"ps_vs_scratch: error: {exc}", file=sys.stderr)
        return 2
    print_report(report)
    if as_json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
