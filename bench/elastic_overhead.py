"""Cost of elasticity: one SGD step of the supernet vs the extracted static model.

Forward + backward + optimizer step, batch 16, resolution 128, 1000 classes, OFA-MBv3 space, with the
largest, a middle (median MACs of 1,000 seeded samples) and the smallest subnet active. Each round
times every subnet's supernet step next to its static twin's step, alternating which goes first, so
machine noise hits both alike; the overhead is the median of the per-round ratios, and its
interquartile range shows how noisy the machine was. ``--invocations N`` runs the whole measurement
in N fresh processes and reports the median of their medians, with each one's figure: one process
can draw a heap layout that makes the allocator return memory and fault it back in every step (the
``faults_*`` figures count minor page faults per step), and a fresh process draws again.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ofa.arch import Arch
from ofa.encoding import sample_arch
from ofa.space import SearchSpace
from ofa.supernet import OFAMobileNetV3


def sgd_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    start = clock()
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    return clock() - start


def middle_arch(space: SearchSpace, resolution: int, samples: int = 1000, seed: int = 0) -> Arch:
    """The sample at the median MACs (index n // 2 when sorted) of ``samples`` seeded draws."""
    rng = np.random.default_rng(seed)
    archs = [sample_arch(space, rng, resolutions=[resolution]) for _ in range(samples)]
    return sorted(archs, key=space.macs)[samples // 2]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q1, q2, q3


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(
    supernet: OFAMobileNetV3,
    runs: dict[str, tuple[Arch, torch.nn.Module, torch.optim.Optimizer]],
    batch: tuple[torch.Tensor, torch.Tensor],
    rounds: int,
    clock: Callable[[], float],
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[int]]]:
    """Per-step times and minor page faults of each model, and the per-round supernet/static ratios
    (two warm-up rounds)."""
    super_opt = torch.optim.SGD(supernet.parameters(), lr=1e-4, momentum=0.9)
    keys = [f"{kind}_{name}" for name in runs for kind in ("supernet", "static")]
    times: dict[str, list[float]] = {key: [] for key in keys}
    faults: dict[str, list[int]] = {key: [] for key in keys}
    ratios: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds + 2):
        for name, (arch, static, opt) in runs.items():
            supernet.set_active(arch)
            step: dict[str, tuple[float, int]] = {}
            for kind in ("static", "supernet") if r % 2 else ("supernet", "static"):
                model, optimizer = (static, opt) if kind == "static" else (supernet, super_opt)
                before = minor_faults()
                seconds = sgd_step(model, optimizer, *batch, clock)
                step[kind] = (seconds, minor_faults() - before)
            if r >= 2:
                for kind, (seconds, count) in step.items():
                    times[f"{kind}_{name}"].append(seconds)
                    faults[f"{kind}_{name}"].append(count)
                ratios[name].append(step["supernet"][0] / step["static"][0])
    return times, ratios, faults


def one_invocation(args: argparse.Namespace) -> dict[str, object]:
    """The whole measurement in this process."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    clock = time.thread_time if args.cpu_time else time.perf_counter
    torch.manual_seed(0)
    space = SearchSpace.mbv3()
    supernet = OFAMobileNetV3(space).train()
    x = torch.randn(args.batch, 3, args.resolution, args.resolution)
    y = torch.randint(0, 1000, (args.batch,))
    subnets = {
        "max": space.max_arch(args.resolution),
        "mid": middle_arch(space, args.resolution),
        "min": space.min_arch(args.resolution),
    }
    runs = {}
    for name, arch in subnets.items():
        static = supernet.extract(arch).train()
        runs[name] = (arch, static, torch.optim.SGD(static.parameters(), lr=1e-4, momentum=0.9))
    times, ratios, faults = measure(supernet, runs, (x, y), args.rounds, clock)
    result: dict[str, object] = {f"{k}_ms": round(statistics.median(v) * 1000, 2) for k, v in times.items()}
    result.update({f"faults_{k}": statistics.median(v) for k, v in faults.items()})
    for name in runs:
        q1, q2, q3 = quartiles(ratios[name])
        result[f"overhead_{name}"] = round(q2, 3)
        result[f"overhead_{name}_iqr"] = [round(q1, 3), round(q3, 3)]
    result["threads"] = torch.get_num_threads()
    result["clock"] = "thread_cpu" if args.cpu_time else "wall"
    result["mid_arch"] = subnets["mid"].short()
    result["mid_macs_m"] = round(space.macs(subnets["mid"]) / 1e6, 1)
    return result


def several_invocations(args: argparse.Namespace) -> dict[str, object]:
    """The measurement in ``args.invocations`` fresh processes, one after another: the median of their
    medians, and each one's median (``*_runs``)."""
    command = [sys.executable, __file__, "--json", "--invocations", "1", "--rounds", str(args.rounds)]
    command += ["--batch", str(args.batch), "--resolution", str(args.resolution)]
    command += ["--threads", str(args.threads)] if args.threads is not None else []
    command += ["--cpu-time"] if args.cpu_time else []
    runs = []
    for _ in range(args.invocations):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"elastic_overhead: an invocation failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    result: dict[str, object] = {}
    for name in ("max", "mid", "min"):
        figures = [run[f"overhead_{name}"] for run in runs]
        result[f"overhead_{name}"] = round(statistics.median(figures), 3)
        result[f"overhead_{name}_runs"] = figures
        for kind in ("supernet", "static"):
            result[f"faults_{kind}_{name}_runs"] = [run[f"faults_{kind}_{name}"] for run in runs]
    for key in ("threads", "clock", "mid_arch", "mid_macs_m"):
        result[key] = runs[0][key]
    result["invocations"] = args.invocations
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with this thread's CPU clock (needs --threads 1): steadier on a shared machine",
    )
    parser.add_argument(
        "--invocations", type=int, default=1, help="fresh processes to run it in (reports the median of theirs)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time needs --threads 1 (other threads' CPU time would not be counted)")
    if args.invocations < 1:
        parser.error("--invocations must be at least 1")
    result = several_invocations(args) if args.invocations > 1 else one_invocation(args)
    for key, value in result.items():
        print(f"{key:>20}: {value}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
