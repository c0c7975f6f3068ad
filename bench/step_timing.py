"""Timing one SGD step of a supernet against the static models it is compared with; shared by
`bench.elastic_overhead`, `bench.official_overhead` and `bench.elastic_breakdown`.

Imports nothing of the ``ofa`` package: `bench.official_overhead` runs it in a process whose ``ofa``
package is the official code's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from bench.common import ROOT, last_json

Runs = dict[str, tuple[Any, torch.nn.Module, torch.optim.Optimizer]]  # name -> (arch, static twin, its optimizer)


class StepTimes(NamedTuple):
    """Seconds of one SGD step's parts (their sum is the step's time): where a supernet's step differs from its
    twin's."""

    forward: float  # the forward pass and the loss
    backward: float
    update: float  # the optimizer's step

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.update


def sgd_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    clock: Callable[[], float] = time.perf_counter,
) -> StepTimes:
    start = clock()
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    forward = clock()
    loss.backward()
    backward = clock()
    opt.step()
    return StepTimes(forward - start, backward - forward, clock() - backward)


SGD_SETTINGS = {"lr": 1e-4, "momentum": 0.9}  # of the optimizer every timed model gets


def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer every timed model gets."""
    return torch.optim.SGD(model.parameters(), **SGD_SETTINGS)


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor],
    clock: Callable[[], float],
) -> tuple[StepTimes, int]:
    """The parts' seconds and the minor page faults of one `sgd_step`."""
    before = minor_faults()
    parts = sgd_step(model, optimizer, *batch, clock)
    return parts, minor_faults() - before


def _record(
    step: dict[str, tuple[StepTimes, int]], times: dict[str, list[StepTimes]], faults: dict[str, list[int]]
) -> None:
    """Append one round's ``timed_step`` results, keyed like ``times`` and ``faults``."""
    for key, (parts, count) in step.items():
        times[key].append(parts)
        faults[key].append(count)


def measure(
    supernet: torch.nn.Module,
    activate: Callable[[Any], object],
    runs: Runs,
    batch: tuple[torch.Tensor, torch.Tensor],
    rounds: int,
    clock: Callable[[], float],
    super_opt: torch.optim.Optimizer | None = None,
) -> tuple[dict[str, list[StepTimes]], dict[str, list[float]], dict[str, list[int]]]:
    """Per-step times and minor page faults of each model, and the per-round supernet/static ratios
    (two warm-up rounds). ``activate(arch)`` makes the supernet run ``arch``; within a round the two
    sides alternate which goes first, so machine noise hits both alike. The supernet's optimizer is
    ``super_opt`` (default: `sgd`'s)."""
    super_opt = super_opt or sgd(supernet)
    keys = [f"{kind}_{name}" for name in runs for kind in ("supernet", "static")]
    times: dict[str, list[StepTimes]] = {key: [] for key in keys}
    faults: dict[str, list[int]] = {key: [] for key in keys}
    ratios: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds + 2):
        for name, (arch, static, opt) in runs.items():
            activate(arch)
            step: dict[str, tuple[StepTimes, int]] = {}
            for kind in ("static", "supernet") if r % 2 else ("supernet", "static"):
                model, optimizer = (static, opt) if kind == "static" else (supernet, super_opt)
                step[kind] = timed_step(model, optimizer, batch, clock)
            if r >= 2:
                _record({f"{kind}_{name}": result for kind, result in step.items()}, times, faults)
                ratios[name].append(step["supernet"][0].total / step["static"][0].total)
    return times, ratios, faults


def measure_models(
    models: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]],
    batch: tuple[torch.Tensor, torch.Tensor],
    rounds: int,
    clock: Callable[[], float],
) -> tuple[dict[str, list[StepTimes]], dict[str, list[float]], dict[str, list[int]]]:
    """Per-step times and minor page faults of each model, and each later model's per-round ratio to the
    first (two warm-up rounds). Each round runs the models in a fresh seeded order, so machine noise hits
    all alike and no model always follows the same neighbour (whose freed memory, warm in cache, it would
    reuse when their tensors have the same sizes)."""
    names = list(models)
    shuffler = random.Random(0)
    times: dict[str, list[StepTimes]] = {name: [] for name in names}
    faults: dict[str, list[int]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names[1:]}
    for r in range(rounds + 2):
        step = {name: timed_step(*models[name], batch, clock) for name in shuffler.sample(names, len(names))}
        if r >= 2:
            _record(step, times, faults)
            for name in ratios:
                ratios[name].append(step[name][0].total / step[names[0]][0].total)
    return times, ratios, faults


def _median_ms(seconds: Iterable[float]) -> float:
    return round(statistics.median(seconds) * 1000, 2)


def summarize(
    times: dict[str, list[StepTimes]], ratios: dict[str, list[float]], faults: dict[str, list[int]]
) -> dict[str, object]:
    """Median step times (ms) and page faults, each median ratio with its quartiles (``ratios`` names them, in
    order), and per part of the step (``forward_ms``, ``backward_ms``, ``update_ms``) each model's median."""
    result: dict[str, object] = {"ratios": list(ratios)}
    result.update({f"{k}_ms": _median_ms(step.total for step in v) for k, v in times.items()})
    for part in StepTimes._fields:
        result[f"{part}_ms"] = {k: _median_ms(getattr(step, part) for step in v) for k, v in times.items()}
    result.update({f"faults_{k}": statistics.median(v) for k, v in faults.items()})
    for name, values in ratios.items():
        q1, q2, q3 = statistics.quantiles(values, n=4)
        result[f"overhead_{name}"] = round(q2, 3)
        result[f"overhead_{name}_iqr"] = [round(q1, 3), round(q3, 3)]
    return result


def add_timing_arguments(parser: argparse.ArgumentParser, rounds: int, invocations: int) -> None:
    """The flags every step-timing script takes (``rounds`` and ``invocations`` are its defaults)."""
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument(
        "--invocations", type=int, default=invocations, help="fresh processes (reports the median of theirs)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")


def check_timing_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error (exit 2) for counts the measurement cannot run with."""
    if args.invocations < 1:
        parser.error("--invocations must be at least 1")
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (the quartiles of the per-round ratios need two)")


def invocation_command(module: str, args: argparse.Namespace) -> list[str]:
    """The command that runs ``module`` once in a fresh process with ``args``' timing flags, printing JSON."""
    command = [sys.executable, "-m", module, "--json", "--invocations", "1", "--rounds", str(args.rounds)]
    return [*command, "--batch", str(args.batch), "--resolution", str(args.resolution)]


def median_of_invocations(
    command: list[str],
    invocations: int,
    passed_on: list[str],
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> dict[str, object]:
    """Run ``command`` (which prints a `summarize` result as JSON on its last line) in ``invocations``
    fresh processes in ``cwd``, one after another: the median of their ``overhead_*`` figures, each
    one's (``*_runs``), their page faults (``faults_*_runs``), the median of each model's median time of each
    part of the step (``forward_ms``, ...), and the ``passed_on`` keys of the first."""
    runs = []
    for _ in range(invocations):
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
        run = last_json(done.stdout) if done.returncode == 0 else {}
        if not run:
            why = (done.stderr.strip().splitlines() or ["no JSON result"])[-1]
            sys.exit(f"{' '.join(command[1:3])}: an invocation failed: {why}")
        runs.append(run)
    result: dict[str, object] = {}
    for name in runs[0]["ratios"]:
        figures = [run[f"overhead_{name}"] for run in runs]
        result[f"overhead_{name}"] = round(statistics.median(figures), 3)
        result[f"overhead_{name}_runs"] = figures
    for key in (key for key in runs[0] if key.startswith("faults_")):
        result[f"{key}_runs"] = [run[key] for run in runs]
    for key in (f"{part}_ms" for part in StepTimes._fields):
        result[key] = {model: round(statistics.median(run[key][model] for run in runs), 2) for model in runs[0][key]}
    result.update({key: runs[0][key] for key in passed_on})
    result["invocations"] = invocations
    return result


def report(result: dict[str, object], as_json: bool) -> None:
    """One ``key: value`` line per figure, and with ``as_json`` the whole result as the last line."""
    for key, value in result.items():
        print(f"{key:>20}: {value}")
    if as_json:
        print(json.dumps(result))
