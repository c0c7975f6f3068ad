"""Cost of elasticity: one SGD step of the supernet vs the extracted static model.

Forward + backward + optimizer step, batch 16, resolution 128, 1000 classes, OFA-MBv3 space, with the
largest, a middle (median MACs of 1,000 seeded samples) and the smallest subnet active. Each round
times every subnet's supernet step next to its static twin's step, alternating which goes first, so
machine noise hits both alike; the overhead is the median of the per-round ratios, and its
interquartile range shows how noisy the machine was.
"""

from __future__ import annotations

import argparse
import json
import statistics
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


def measure(
    supernet: OFAMobileNetV3,
    runs: dict[str, tuple[Arch, torch.nn.Module, torch.optim.Optimizer]],
    batch: tuple[torch.Tensor, torch.Tensor],
    rounds: int,
    clock: Callable[[], float],
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per-step times of each model, and the per-round supernet/static ratios (two warm-up rounds)."""
    super_opt = torch.optim.SGD(supernet.parameters(), lr=1e-4, momentum=0.9)
    times: dict[str, list[float]] = {f"{kind}_{name}": [] for name in runs for kind in ("supernet", "static")}
    ratios: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds + 2):
        for name, (arch, static, opt) in runs.items():
            supernet.set_active(arch)
            if r % 2:
                t_static = sgd_step(static, opt, *batch, clock)
                t_super = sgd_step(supernet, super_opt, *batch, clock)
            else:
                t_super = sgd_step(supernet, super_opt, *batch, clock)
                t_static = sgd_step(static, opt, *batch, clock)
            if r >= 2:
                times[f"supernet_{name}"].append(t_super)
                times[f"static_{name}"].append(t_static)
                ratios[name].append(t_super / t_static)
    return times, ratios


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
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time needs --threads 1 (other threads' CPU time would not be counted)")
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
    times, ratios = measure(supernet, runs, (x, y), args.rounds, clock)
    result: dict[str, object] = {f"{k}_ms": round(statistics.median(v) * 1000, 2) for k, v in times.items()}
    for name in runs:
        q1, q2, q3 = quartiles(ratios[name])
        result[f"overhead_{name}"] = round(q2, 3)
        result[f"overhead_{name}_iqr"] = [round(q1, 3), round(q3, 3)]
    result["threads"] = torch.get_num_threads()
    result["clock"] = "thread_cpu" if args.cpu_time else "wall"
    result["mid_arch"] = subnets["mid"].short()
    result["mid_macs_m"] = round(space.macs(subnets["mid"]) / 1e6, 1)
    for key, value in result.items():
        print(f"{key:>20}: {value}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
