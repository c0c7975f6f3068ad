"""Cost of elasticity: one SGD step of the supernet vs the extracted static model.

Forward + backward + optimizer step, batch 16, resolution 128, 1000 classes, OFA-MBv3 space, with the
largest and with the smallest subnet active; the four configurations are timed interleaved in one
run and compared by medians, so machine noise hits all of them alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from ofa.space import SearchSpace
from ofa.supernet import OFAMobileNetV3


def sgd_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()

    torch.manual_seed(0)
    space = SearchSpace.mbv3()
    supernet = OFAMobileNetV3(space).train()
    x = torch.randn(args.batch, 3, args.resolution, args.resolution)
    y = torch.randint(0, 1000, (args.batch,))
    runs = {}
    for name, arch in (("max", space.max_arch(args.resolution)), ("min", space.min_arch(args.resolution))):
        static = supernet.extract(arch).train()
        runs[name] = (arch, static, torch.optim.SGD(static.parameters(), lr=1e-4, momentum=0.9))
    super_opt = torch.optim.SGD(supernet.parameters(), lr=1e-4, momentum=0.9)

    times: dict[str, list[float]] = {f"{kind}_{name}": [] for name in runs for kind in ("supernet", "static")}
    for r in range(args.rounds + 2):  # two warm-up rounds
        for name, (arch, static, opt) in runs.items():
            supernet.set_active(arch)
            t_super = sgd_step(supernet, super_opt, x, y)
            t_static = sgd_step(static, opt, x, y)
            if r >= 2:
                times[f"supernet_{name}"].append(t_super)
                times[f"static_{name}"].append(t_static)
    medians = {k: statistics.median(v) * 1000 for k, v in times.items()}
    result = {f"{k}_ms": round(v, 2) for k, v in medians.items()}
    for name in runs:
        result[f"overhead_{name}"] = round(medians[f"supernet_{name}"] / medians[f"static_{name}"], 3)
    for key, value in result.items():
        print(f"{key:>20}: {value}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
