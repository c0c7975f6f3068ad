"""Progressive-shrinking schedules after the same full network, judged on validation, rendered into the docs.

The recipe's ``full`` phase is trained alone once per seed and cached (a PS run of that one phase);
every schedule starts from that supernet (``init.supernet``), so the schedules differ only after it:

- ``one_phase``: the recipe's own phases after ``full`` (frozen teacher: the full network as loaded);
- ``one_phase_inplace``: the same with in-place distillation (each step's largest subnet teaches);
- ``one_phase_half``: the recipe's phases after ``full`` with half their epochs (warm-up kept): the one-phase
  schedule at the length the 4x cost budget allows (`bench.ps_cost` measures the recipe's over it);
- ``paper_equal``: the paper's order as the official code runs it (kernel, depth 1/2, expand 1/2 phases;
  1 / 2 / 4 subnets a step, no sandwich, frozen teacher, its lr ratios from the one-phase lr), with
  the one-phase schedule's total epochs split in the official proportions (`bench.ps_rules`);
- ``paper_compute``: the same order with as many subnet forward/backward passes as ``one_phase``.

The full network is judged converged by the twins' rule: its ladder (recipe's full epochs, 2x, ...,
every seed) stops at the first doubling whose validation gain is not above max(0.3, 2 x SE). Each
schedule is evaluated on the 8 subnets of `bench.ps_vs_scratch` (validation and test) and compared
with their best twins from its cache where those are decided. Each schedule's cost, its full network and
its phases against the largest twin at its converged epoch count, is timed on this machine by
`bench.ps_cost` (``--cost``, which trains nothing: run it on quiet cores once the twins are decided). The
schedule to ship has the best mean validation top-1 over the 8 subnets among those within the 4x budget;
the best regardless of cost is shown beside it. A run prints the tables; ``--render`` runs nothing and
writes them into ``docs/progressive_shrinking.md`` between their markers from the cached runs, never
from typed figures.

The Fashion-MNIST tables of the docs ran with ``--set phases.elastic.epochs=40``, the recipe's elastic phase
then; the recipe has since shipped ``one_phase_half`` (1+20), and that override keeps the runs' digests.

    python -m bench.ps_ablation [--recipe fashion] [--seeds 0 1] [--scratch-epochs 20] [--set K=V ...]
        [--full-doublings 3] [--worker i/n] [--threads 1] [--plan] [--cost] [--render] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from functools import partial
from pathlib import Path
from typing import Any

import torch

from bench import ps_cost, ps_runs
from bench import ps_rules as rules
from bench import ps_vs_scratch as ps
from bench.common import DATA, ROOT
from bench.ps_jobs import Job, Plan, parse_worker, plan_text, work
from ofa.families.family import Arch
from ofa.train import train
from ofa.train.recipe import Recipe, recipe_from_dict
from ofa.utils.errors import OFAError
from ofa.utils.io import read_json, write_json, write_text
from ofa.utils.machine import cpu_name

HISTORY = DATA / "ps_ablation.json"  # the screening runs before issue 31 (chosen on test), kept as history
DOC = ROOT / "docs" / "progressive_shrinking.md"
BEGIN, END = "<!-- ablation table: python -m bench.ps_ablation --render -->", "<!-- end of ablation table -->"
SCHEDULES_BEGIN = "<!-- schedules table: python -m bench.ps_ablation --render -->"
SCHEDULES_END = "<!-- end of schedules table -->"
SHOWN = ("smallest", "middle", "largest")
SCHEDULES = {
    "one_phase": "the recipe's phases after the full network (frozen teacher)",
    "one_phase_inplace": "the same, in-place distillation (each step's largest subnet teaches)",
    "one_phase_half": "the recipe's phases after the full network with half their epochs (warm-up kept)",
    "paper_equal": "the paper's order (kernel, depth, expand; 1/2/4 subnets, no sandwich, frozen teacher), "
    "the same total epochs",
    "paper_compute": "the paper's order with the same subnet forward/backward passes",
}


class Ablation:
    """The schedules of one recipe and the runs behind them (a `bench.ps_vs_scratch` bench for subnets and twins)."""

    def __init__(self, cfg: ps.BenchConfig, full_doublings: int = rules.MAX_DOUBLINGS) -> None:
        b = ps.Bench(cfg)
        if cfg.scratch_epochs is None:  # the twins' E: the full network's epochs, as bench.ps_vs_scratch is run
            cfg = dataclasses.replace(cfg, scratch_epochs=b.recipe.phases[0].total_epochs)
            b = ps.Bench(cfg)
        self.bench = b
        self.cfg, self.cache = cfg, cfg.cache
        names = [p.name for p in b.recipe.phases]
        if names[0] != "full" or len(names) < 2:
            raise OFAError(f"{b.path}: the ablation needs a first phase named 'full' and phases after it")
        self.full_epochs = b.recipe.phases[0].total_epochs
        self.raw = b.recipe.training_dict()
        self.largest = {"largest": b.recipe.space.max_arch()}
        self.full_doublings = full_doublings

    # -------------------------------------------------------------- the full network
    def full_raw(self, seed: int, epochs: int) -> dict[str, Any]:
        full = {**self.raw["phases"][0], "epochs": epochs - self.raw["phases"][0]["warmup_epochs"]}
        return {**self.raw, "seed": seed, "phases": [full], "distill": {**self.raw["distill"], "teacher": "none"}}

    def full_key(self, seed: int, epochs: int) -> str:
        return ps_runs.digest(self.full_raw(seed, epochs))

    def full_record(self, seed: int, epochs: int) -> dict[str, Any] | None:
        return ps_runs.read_cached(ps_runs.ps_eval_path(self.cache, self.full_key(seed, epochs), self.largest))

    def full_job(self, seed: int, epochs: int) -> Job:
        recipe = recipe_from_dict(self.full_raw(seed, epochs), f"{self.bench.path} (full network)")
        return Job(
            f"full-{self.full_key(seed, epochs)}",
            "full",
            f"full network {epochs} epochs seed {seed}",
            epochs,
            epochs,
            lambda: ps_runs.ps_run(recipe, self.largest, self.bench.data, self.cache),
        )

    def full_ladder(self) -> tuple[rules.Ladder, dict[int, dict[int, dict[str, Any]]]]:
        records: dict[int, dict[int, dict[str, Any]]] = {}
        while True:
            val = {e: [r["val_top1"]["largest"] for r in by_seed.values()] for e, by_seed in records.items()}
            state = rules.ladder(self.full_epochs, val, len(self.cfg.seeds), self.full_doublings)
            new = [e for e in state.levels if e not in records]
            if not new:
                return state, records
            for e in new:
                found = {s: self.full_record(s, e) for s in self.cfg.seeds}
                records[e] = {s: r for s, r in found.items() if r is not None}

    def full_supernet(self, seed: int) -> Path:
        """The weights a schedule starts from. Weights are not committed, so where the full network's record
        is here but its weights are not (a fresh clone), it is retrained into ``rebuilt/`` and its top-1 put
        beside the record's in ``rebuilt.json``: equal on the CPU that made the record (seeds in, same numbers
        out), within rounding on another CPU, whose kernels may add in another order."""
        folder = self.cache / f"ps-{self.full_key(seed, self.full_epochs)}"
        if (folder / "supernet.pt").is_file():
            return folder / "supernet.pt"
        recipe = recipe_from_dict(self.full_raw(seed, self.full_epochs), f"{self.bench.path} (full network)")
        path = folder / "rebuilt" / "supernet.pt"  # written once the rebuild finished: not trained (or tested) again
        if not path.is_file():
            path = train(recipe, folder / "rebuilt", resume=True)
        if not (folder / "rebuilt.json").is_file():
            record = self.full_record(seed, self.full_epochs) or {}
            again = ps_runs.evaluate_supernet(path, recipe, self.largest, self.bench.data)
            recorded = {f"{s}_top1": record.get(f"{s}_top1") for s in ps_runs.SPLITS}
            write_json(folder / "rebuilt.json", {"cpu": cpu_name(), "recorded": recorded, "rebuilt": again})
            print(f"rebuilt {folder.name} on {cpu_name()}: {again} (recorded: {recorded})", flush=True)
        return path

    # -------------------------------------------------------------- the schedules
    def phases(self, name: str) -> list[dict[str, Any]]:
        after = self.raw["phases"][1:]
        if name == "one_phase_half":
            return [{**p, "epochs": max(1, p["epochs"] // 2)} for p in after]
        if name.startswith("one_phase"):
            return after
        total = sum(p["epochs"] + p["warmup_epochs"] for p in after)
        if name == "paper_compute":
            total = rules.compute_matched_total(
                sum((p["epochs"] + p["warmup_epochs"]) * p["subnets_per_step"] for p in after)
            )
        try:
            return paper_phases(self.bench.recipe.space, total, after[0]["lr"])
        except ValueError as exc:
            raise OFAError(f"{self.bench.path}: phases after 'full': {exc}") from None

    def schedule_raw(self, name: str, seed: int, supernet: str) -> dict[str, Any]:
        teacher = "inplace" if name.endswith("inplace") else "init"
        distill = {**self.raw["distill"], "teacher": teacher, "teacher_phase": None}
        init = {**self.raw["init"], "supernet": supernet}
        return {**self.raw, "seed": seed, "phases": self.phases(name), "distill": distill, "init": init}

    def schedule_key(self, name: str, seed: int) -> str:
        """The run's digest, naming its starting supernet by the full run's digest (not by a path on this machine)."""
        return ps_runs.digest(self.schedule_raw(name, seed, f"ps-{self.full_key(seed, self.full_epochs)}"))

    def schedule_record(self, name: str, seed: int) -> dict[str, Any] | None:
        return ps_runs.read_cached(ps_runs.ps_eval_path(self.cache, self.schedule_key(name, seed), self.bench.subnets))

    def schedule_job(self, name: str, seed: int) -> Job:
        phases = self.phases(name)
        key = self.schedule_key(name, seed)

        def run() -> dict[str, Any]:
            start = self.full_supernet(seed)
            recipe = recipe_from_dict(self.schedule_raw(name, seed, str(start)), f"{self.bench.path} ({name})")
            return ps_runs.ps_run(recipe, self.bench.subnets, self.bench.data, self.cache, key=key)

        return Job(
            f"schedule-{key}",
            "schedule",
            f"schedule {name} seed {seed}",
            sum(p["epochs"] + p["warmup_epochs"] for p in phases),
            sum((p["epochs"] + p["warmup_epochs"]) * p["subnets_per_step"] for p in phases),
            run,
        )

    # -------------------------------------------------------------- the cost budget
    def cost_recipe(self, name: str) -> Recipe:
        """The full phase and the schedule's phases as one recipe, with the schedule's kind of teacher (a frozen
        full network, which costs what the recipe's teacher costs, or in place): what `bench.ps_cost` slices."""
        distill = self.raw["distill"]
        if name.endswith("inplace"):
            distill = {**distill, "teacher": "inplace", "teacher_phase": None}
        raw = {**self.raw, "phases": [self.raw["phases"][0], *self.phases(name)], "distill": distill}
        return recipe_from_dict(raw, f"{self.bench.path} ({name}, its cost)")

    def cost(self, name: str, twin: tuple[Arch, float, int], measure: bool) -> dict[str, Any] | None:
        """The schedule's cost ratio to the largest twin (arch, lr, converged epochs), `bench.ps_cost` on this
        machine: measured where ``measure`` and it is not cached yet, else as cached (None: not measured)."""
        args = (self.cache, self.cost_recipe(name), twin, self.bench.steps_per_epoch, self.cfg.cost_rounds)
        return ps_cost.cached_measure(*args) if measure else ps_runs.read_cached(ps_cost.cost_path(*args))


def paper_phases(space: Any, total: int, lr: float) -> list[dict[str, Any]]:
    """The paper's phases for ``space`` over ``total`` epochs; the kernel phase at ``lr``, the others at the
    official ratios to it; every resolution throughout (the official code samples one per batch)."""
    ks, es, ds = sorted(space.kernels), sorted(space.expands), sorted(space.depths)
    choices = {
        "kernel": (ks, es[-1:], ds[-1:]),
        "depth_1": (ks, es[-1:], ds[-2:]),
        "depth_2": (ks, es[-1:], ds),
        "expand_1": (ks, es[-2:], ds),
        "expand_2": (ks, es, ds),
    }
    phases = []
    for (name, warm, _, ratio, subnets), epochs in zip(rules.PAPER_ORDER, rules.paper_split(total), strict=True):
        kernels, expands, depths = choices[name]
        phases.append(
            {
                "name": name,
                "epochs": epochs - (1 if warm else 0),
                "lr": lr * ratio,
                "warmup_epochs": 1 if warm else 0,
                "kernels": kernels,
                "expands": expands,
                "depths": depths,
                "resolutions": sorted(space.resolutions),
                "subnets_per_step": subnets,
                "sandwich": False,
                "reorganize_channels": name.startswith("expand"),
            }
        )
    return phases


def plan(a: Ablation) -> Plan:
    """The full networks the ladder asks for, then every schedule whose full network is there."""
    jobs, waiting = [], []
    state, records = a.full_ladder()
    jobs += [a.full_job(s, e) for e in state.pending for s in a.cfg.seeds if s not in records.get(e, {})]
    if state.pending:
        waiting.append(f"full network: the ladder waits on {', '.join(map(str, state.pending))} epochs")
    for seed in a.cfg.seeds:
        start = a.full_record(seed, a.full_epochs)
        for name in SCHEDULES:
            if a.schedule_record(name, seed) is not None:
                continue
            if start is None:
                waiting.append(f"schedule {name} seed {seed} waits on its full network")
            else:
                jobs.append(a.schedule_job(name, seed))
    return Plan(tuple(jobs), tuple(waiting))


def _mean(values: list[float]) -> float | None:
    return statistics.mean(values) if values else None


def report(a: Ablation, measure_cost: bool = False) -> dict[str, Any]:
    """What is cached: the full network's ladder, each schedule's seed means and, where decided, the twins' bars
    and each schedule's cost ratio (measured here first where ``measure_cost``)."""
    state, records = a.full_ladder()
    full = {
        str(e): {
            "seeds": sorted(by_seed),
            **{f"{s}_top1": _mean([r[f"{s}_top1"]["largest"] for r in by_seed.values()]) for s in ps_runs.SPLITS},
            "cpu_seconds": _mean([r["cpu_seconds"] for r in by_seed.values()]),
        }
        for e, by_seed in records.items()
        if by_seed
    }
    twins = {n: ps.twin_state(a.bench, n, arch).summary for n, arch in a.bench.subnets.items()}
    largest = twins["largest"]
    cost_twin = ps.cost_twin(a.bench, largest) if largest else None
    schedules = {}
    for name in SCHEDULES:
        runs = [r for s in a.cfg.seeds if (r := a.schedule_record(name, s)) is not None]
        shape = {
            "seeds": [r["seed"] for r in runs],
            "phases": [
                f"{p['name']} {p['epochs'] + p['warmup_epochs']}x{p['subnets_per_step']}" for p in a.phases(name)
            ],
            "passes": a.schedule_job(name, a.cfg.seeds[0]).passes,
        }
        cost = a.cost(name, cost_twin, measure_cost) if cost_twin else None
        shape["cost_ratio"] = cost["ratio"] if cost else None
        if not runs:  # not run yet: its phases only
            schedules[name] = shape
            continue
        starts = [a.full_record(r["seed"], a.full_epochs)["cpu_seconds"] for r in runs]
        row = {
            **shape,
            "cpu_seconds": statistics.mean(r["cpu_seconds"] + c for r, c in zip(runs, starts, strict=True)),
            "subnets": {
                n: {f"{s}_top1": statistics.mean(r[f"{s}_top1"][n] for r in runs) for s in ps_runs.SPLITS}
                for n in a.bench.subnets
            },
        }
        row["mean_val"] = statistics.mean(v["val_top1"] for v in row["subnets"].values())
        if all(twins.values()):
            row["min_delta_test"] = min(v["test_top1"] - twins[n]["bar_test"] for n, v in row["subnets"].items())
        schedules[name] = row
    complete = {n: r for n, r in schedules.items() if len(r["seeds"]) == len(a.cfg.seeds)}  # every seed run
    every = len(complete) == len(SCHEDULES)
    costed = every and all(r["cost_ratio"] is not None for r in complete.values())
    within = {n: r for n, r in complete.items() if costed and r["cost_ratio"] <= rules.BUDGET_RATIO}
    return {
        "recipe": str(a.bench.path),
        "seeds": list(a.cfg.seeds),
        "full_epochs": a.full_epochs,
        "full": full,
        "full_gains": [{**g.__dict__, "gains": g.gains} for g in state.gains],
        "full_converged_epochs": state.converged_epochs,
        "full_ladder_done": state.done,
        "schedules": schedules,
        "winner_on_val": max(complete, key=lambda n: complete[n]["mean_val"]) if every else None,
        "costs_measured": costed,
        "budget_ratio": rules.BUDGET_RATIO,
        "winner_in_budget": max(within, key=lambda n: within[n]["mean_val"]) if within else None,
    }


def _vt(v: dict[str, float]) -> str:
    return f"{v['val_top1']:.2f} / {v['test_top1']:.2f}"


def render(r: dict[str, Any]) -> str:
    """The markdown tables of a `report`: the full network's ladder, then the schedules after it."""
    lines = [
        f"Full network (`{Path(r['recipe']).name}` phase `full` alone), largest subnet, seed means of {r['seeds']}:",
        "",
        "| full-network epochs | seeds | validation top-1 | test top-1 | CPU s |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {e} | {len(f['seeds'])} | {f['val_top1']:.2f} | {f['test_top1']:.2f} | {f['cpu_seconds']:.0f} |"
        for e, f in sorted(r["full"].items(), key=lambda kv: int(kv[0]))
    ]
    gains = "; ".join(
        f"{g['start']}→{g['end']}: {g['mean']:+.2f} (bar {g['threshold']:.2f}, {'gains' if g['gains'] else 'no gain'})"
        for g in r["full_gains"]
    )
    verdict = (
        f"converged at {r['full_converged_epochs']} epochs"
        if r["full_converged_epochs"]
        else ("not converged within the ladder" if r["full_ladder_done"] else "ladder not finished")
    )
    lines += ["", f"Doublings on validation: {gains or 'none yet'}; the full network is {verdict}.", ""]
    head = " | ".join(f"{n} val / test" for n in SHOWN)
    lines += [
        "| schedule | what | phases (epochs × subnets/step) | passes/image | CPU s (full + schedule), as recorded | "
        f"cost ratio to the largest twin, measured here (budget {r['budget_ratio']:g}×) | "
        f"seeds | mean val of the 8 | {head} | "
        "worst test Δ vs best twin |",
        "|---|---|---|---|---|---|---|---|" + "---|" * len(SHOWN) + "---|",
    ]
    for name, s in r["schedules"].items():
        what = f"| {name} | {SCHEDULES[name]} | {', '.join(s['phases'])} | {s['passes']} |"
        cost = "not measured" if s["cost_ratio"] is None else f"{s['cost_ratio']:.2f}"
        if not s["seeds"]:
            lines.append(f"{what} not run | {cost} | 0 |" + " |" * (len(SHOWN) + 2))
            continue
        delta = f"{s['min_delta_test']:+.2f}" if "min_delta_test" in s else "twins pending"
        cells = " | ".join(_vt(s["subnets"][n]) for n in SHOWN)
        lines.append(
            f"{what} {s['cpu_seconds']:.0f} | {cost} | {len(s['seeds'])} | {s['mean_val']:.2f} | {cells} | {delta} |"
        )
    if not r["winner_on_val"]:
        verdict = "not every schedule has every seed yet"
    else:
        in_budget = r["winner_in_budget"] or "none"
        verdict = f"{r['winner_on_val']}; within the {r['budget_ratio']:g}× budget, the one to ship: " + (
            in_budget if r["costs_measured"] else "not every cost measured yet (`--cost`)"
        )
    lines += ["", f"Best on validation (mean of the 8 subnets): {verdict}."]
    return "\n".join(lines)


def render_history(records: dict[str, dict[str, Any]]) -> str:
    """The markdown table: change -> PS top-1 and PS - scratch of each subnet, and the cost ratio."""
    head = (
        "| run | change | train/test images, scratch epochs, seeds | "
        + " | ".join(f"{n} PS (Δ)" for n in SHOWN)
        + " | PS s | PS / scratch-largest: wall (CPU) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in records.values():
        cells = [f"{r['subnets'][n]['ps']:.2f} ({r['subnets'][n]['delta']:+.2f})" for n in SHOWN]
        epochs = r["subnets"]["largest"]["scratch_epochs"]
        lines.append(
            f"| {r['name']} | {r['change']} | {r['train_images']}/{r['test_images']}, {epochs}, "
            f"{len(r['seeds'])} | "
            + " | ".join(cells)
            + f" | {r['ps_seconds']:.0f} | {r['cost_ratio']:.2f} ({r['cpu_ratio']:.2f}) |"
        )
    scratch: dict[tuple, dict[str, Any]] = {}
    for r in records.values():
        data = tuple(o for o in r["overrides"] if o.startswith("data."))  # twins differ with their data
        key = (r["train_images"], r["test_images"], r["subnets"]["largest"]["scratch_epochs"], data)
        if key not in scratch or r["subnets"]["largest"]["scratch_2x"] is not None:  # prefer checked twins
            scratch[key] = {"grid": r.get("lr_grid"), **{n: r["subnets"][n] for n in SHOWN}}
    lines += [
        "",
        "From-scratch twins: test top-1 at E epochs / at 2E where measured (the convergence check), "
        "at the lr chosen on validation from the lr grid:",
        "",
        "| train/test images | E | lr grid | " + " | ".join(SHOWN) + " |",
        "|---|---|---|---|---|---|",
    ]
    for (tr, te, epochs, data), subs in scratch.items():
        values = subs.pop("grid")
        grid = ", ".join(f"{g:g}" for g in values) if values else "not recorded"
        cells = [
            f"{s['scratch']:.2f} / {s['scratch_2x']:.2f} (lr {s['scratch_lr']:g})"
            if s["scratch_2x"] is not None
            else f"{s['scratch']:.2f} (lr {s['scratch_lr']:g})"
            for s in subs.values()
        ]
        images = f"{tr}/{te}" + (f" ({', '.join(data)})" if data else "")
        lines.append(f"| {images} | {epochs} | {grid} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _between(text: str, begin: str, end: str, body: str) -> str:
    if begin not in text or end not in text:
        raise OFAError(f"{DOC}: the table markers {begin!r} and {end!r} are missing")
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}"


def write_doc(result: dict[str, Any]) -> None:
    """The schedules' tables, and the screening history's from its records, into the docs page."""
    text = DOC.read_text()
    text = _between(text, SCHEDULES_BEGIN, SCHEDULES_END, render(result))
    if HISTORY.is_file():
        text = _between(
            text, BEGIN, END, render_history({r["name"]: r for r in read_json(HISTORY, "ablation records")})
        )
    write_text(DOC, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="fashion", help="digits, fashion, or a recipe path")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe value")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--scratch-epochs", type=int, help="E of the twins compared with (default: the full phase's)")
    p.add_argument(
        "--full-doublings", type=int, default=rules.MAX_DOUBLINGS, help="most doublings of the full network's ladder"
    )
    p.add_argument("--cache", type=Path, default=ps.DEFAULT_CACHE)
    p.add_argument("--worker", default="0/1", metavar="I/N", help="worker I of N processes sharing the runs")
    p.add_argument("--threads", type=int, help="torch threads of this process")
    p.add_argument("--plan", action="store_true", help="print the pending runs and what waits, run nothing")
    p.add_argument("--render", action="store_true", help="run nothing: write the tables into the docs from the cache")
    p.add_argument(
        "--cost",
        action="store_true",
        help="train nothing: time each finished schedule's cost ratio here (bench.ps_cost; pause other work)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    a = p.parse_args(argv)
    if len(set(a.seeds)) != len(a.seeds) or len(a.seeds) < rules.MIN_SEEDS or a.full_doublings < 0:
        p.error(f"need >= {rules.MIN_SEEDS} distinct seeds and --full-doublings >= 0")
    try:
        worker = parse_worker(a.worker)
    except ValueError as exc:
        p.error(str(exc))
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = ps.BenchConfig(
        recipe=a.recipe,
        overrides=tuple(a.set),
        seeds=tuple(a.seeds),
        scratch_epochs=a.scratch_epochs,
        cache=a.cache,
    )
    try:
        why = ps.missing_data(ps.RECIPES.get(cfg.recipe, Path(cfg.recipe)), cfg.overrides)
        if why:
            print(f"ps_ablation: skipped: {why}")
            return 0
        ablation = Ablation(cfg, a.full_doublings)
        claims = cfg.cache / "claims"
        if a.plan:
            print("\n".join(plan_text(plan(ablation), claims)))
            return 0
        if not (a.render or a.cost):  # a run prints its tables; only --render writes them into the docs
            cfg.cache.mkdir(parents=True, exist_ok=True)
            work(partial(plan, ablation), claims, *worker)
        result = report(ablation, measure_cost=a.cost)
        if a.render:
            write_doc(result)
    except OFAError as exc:
        print(f"ps_ablation: error: {exc}", file=sys.stderr)
        return 2
    print(render(result))
    if a.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
