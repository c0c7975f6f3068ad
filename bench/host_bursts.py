"""How this host's noise comes, and which latency estimator it leaves alone.

Two parts, both on random mbv3 subnets exported to ONNX Runtime (1 thread), random weights:

- bursts: three subnets timed in turn, one block of calls lasting ``--block-ms`` each, for ``--seconds``:
  each one's spread of block medians (interquartile range / median), the spread of the ratio of each to
  the first one's block just before it, and the median wall-clock over CPU time of the calls (1.0: the
  slowdowns are not the OS taking the CPU away, which the estimators already leave out);
- retest: ``--n`` subnets timed as one set twice by each estimator of `ofa.lut.timing.Standalone`
  (``quantile``: each model's own low quantile; ``paired``: ratios to a reference model), the median and
  largest difference between the two timings of a subnet, in % of the first.

    python -m bench.host_bursts [--seconds 30] [--n 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

import numpy as np

from ofa.families.mbv3.space import SearchSpace
from ofa.families.registry import family_of
from ofa.lut.protocols import time_models
from ofa.lut.stats import repeat_stats
from ofa.lut.timing import Standalone
from ofa.runtime.convert import export_onnx
from ofa.runtime.runtimes import OrtRunner


def subnet_runners(n: int, seed: int) -> dict[str, OrtRunner]:
    """``n`` random mbv3 subnets, alternately at 160 and 224 px, as loaded ONNX Runtime sessions."""
    space = replace(SearchSpace.mbv3(), resolutions=(160, 224))
    family, rng = family_of(space), np.random.default_rng(seed)
    runners = {}
    for i in range(n):
        r = space.resolutions[i % 2]
        arch = family.sample_arch(space, rng, resolutions=[r])
        shape = (1, space.in_channels, r, r)
        runners[arch.short()] = OrtRunner(export_onnx(family.build_subnet(space, arch).eval(), shape), shape)
    return runners


def bursts(runners: list[OrtRunner], seconds: float, block_ms: float) -> dict:
    """Blocks of each runner in turn for ``seconds``: block spreads, ratio spreads, wall over CPU time."""
    for runner in runners:
        runner.times(20)
    medians, over_cpu = [[] for _ in runners], []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for i, runner in enumerate(runners):
            wall, cpu = runner.times(max(3, round(block_ms / max(float(np.median(runner.times(3)[0])), 1e-3))))
            medians[i].append(float(np.median(wall)))
            over_cpu.append(float(np.median(wall / np.maximum(cpu, 1e-9))))
    blocks = np.array(medians)
    return {
        "blocks_per_model": blocks.shape[1],
        "block_spread_pct": [round(repeat_stats(b)["spread_pct"], 2) for b in blocks],
        "ratio_spread_pct": [round(repeat_stats(b / blocks[0])["spread_pct"], 2) for b in blocks[1:]],
        "wall_over_cpu": round(float(np.median(over_cpu)), 4),
    }


def retest(runners: dict[str, OrtRunner], estimator: str) -> dict:
    """The set timed twice by ``estimator``: median and largest difference between a subnet's two figures."""
    protocol = Standalone(estimator=estimator)
    first, second = (time_models(runners, protocol) for _ in range(2))
    diffs = [100 * abs(second[k]["mean_ms"] / first[k]["mean_ms"] - 1) for k in runners]
    return {"median_pct": round(float(np.median(diffs)), 2), "max_pct": round(float(np.max(diffs)), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the bursts part (default 30)")
    parser.add_argument("--block-ms", type=float, default=20.0)
    parser.add_argument("--n", type=int, default=8, help="subnets of the retest part (default 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    runners = subnet_runners(args.n, args.seed)
    result = {
        "bursts": bursts(list(runners.values())[:3], args.seconds, args.block_ms),
        "retest": {estimator: retest(runners, estimator) for estimator in ("quantile", "paired")},
    }
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
