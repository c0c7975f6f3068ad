"""Does a reference block every N model blocks cost a table precision? The demo's table, built with each N.

Each round builds the demo's table (the recipe's space and its ``pipeline:`` table settings) once per N, in an
order that alternates between rounds, then times random subnets of the space with `bench.standalone_latency`'s
plain loop, twice. Each table's predictions are judged against that round's plain-loop figures (the same
subnets, minutes apart at most), so every N meets the same ground truth, and the loop's own test-retest says how
far that truth can be trusted on this host. Per N: build seconds, the tables' noise (`meta.noise`, worst
resolution) and the share of subnets within ±10% of the plain loop, each round's and their median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.standalone_latency import Loop, mape, retest_within, runtime_call, share_within
from ofa.families.family import Space
from ofa.families.registry import family_of
from ofa.lut.build import TableBuildConfig, build_table
from ofa.lut.timing import Standalone
from ofa.pipeline.stages import table_protocol
from ofa.train.recipe import load_recipe
from search.latency import LatencyTable


def build(space: Space, out: Path, protocol: Standalone) -> tuple[float, LatencyTable]:
    """The table as the pipeline builds it (`ofa.pipeline.stages.Pipeline.latency_table`, its protocol from
    `table_protocol`), and its seconds."""
    start = time.perf_counter()
    table = build_table(space, TableBuildConfig(out=out, protocol=protocol, progress=False), warn=lambda _: None)
    return round(time.perf_counter() - start, 1), table


def plain_rows(space: Space, n: int, seed: int, loop: Loop) -> list[tuple[object, float, float]]:
    """``n`` random subnets per resolution (random weights): (arch, plain-loop figure, its retest)."""
    rng, family = np.random.default_rng(seed), family_of(space)
    archs = [family.sample_arch(space, rng, resolutions=[r]) for r in space.resolutions for _ in range(n)]
    shape = lambda a: (1, space.in_channels, a.resolution, a.resolution)  # noqa: E731
    calls = [runtime_call("ort-cpu", family.build_subnet(space, a).eval(), shape(a)) for a in archs]
    first, second = loop.figures(calls), loop.figures(calls)
    return list(zip(archs, first, second, strict=True))


def judged(table: LatencyTable, plain: list[tuple[object, float, float]]) -> dict[str, float | None]:
    rows = [{"predicted_ms": table.predict(a), "measured_ms": m} for a, m, _ in plain]
    noise = table.meta.get("noise", {}).get("per_resolution", {})
    return {
        "within_10pct": share_within(rows),
        "mape": mape(rows),
        "noise_pct": max((rec["noise_pct"] for rec in noise.values()), default=None),
    }


def run(recipe: str, every: list[int], rounds: int, n: int, loop: Loop, folder: Path) -> dict:
    """Every round: one table per N (alternating order), then the plain loop; per N each round's figures."""
    parsed = load_recipe(recipe)
    space, base = parsed.space, table_protocol(parsed.pipeline)
    per_n: dict[int, list[dict]] = {k: [] for k in every}
    retests = []
    for round_ in range(rounds):
        tables = {}
        for k in every if round_ % 2 == 0 else every[::-1]:
            seconds, tables[k] = build(space, folder / f"r{round_}_n{k}.yaml", replace(base, reference_every=k))
            per_n[k].append({"build_seconds": seconds})
        plain = plain_rows(space, n, round_, loop)
        retests.append(retest_within([{"measured_ms": m, "retest_ms": r} for _, m, r in plain]))
        for k, table in tables.items():
            per_n[k][-1].update(judged(table, plain))
    summary = {
        str(k): {
            "build_seconds_median": statistics.median(r["build_seconds"] for r in runs),
            "within_10pct_median": statistics.median(r["within_10pct"] for r in runs),
            "rounds": runs,
        }
        for k, runs in per_n.items()
    }
    return {
        "recipe": recipe,
        "protocol": {"blocks": base.blocks, "budget_s": base.budget_s, "block_ms": base.block_ms},
        "subnets": n * len(space.resolutions),
        "retest_within_10pct": retests,
        "by_reference_every": summary,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/digits.yaml", help="its space and pipeline table settings")
    parser.add_argument("--every", type=int, nargs="+", default=[1, 2], help="values of reference_every compared")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=20, help="random subnets per resolution for the plain loop")
    parser.add_argument("--calls", type=int, default=Loop.calls, help="plain loop: timed calls per repeat")
    parser.add_argument("--repeats", type=int, default=Loop.repeats, help="plain loop: repeats per subnet")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    loop = Loop(calls=args.calls, repeats=args.repeats)
    with tempfile.TemporaryDirectory(prefix="reference-every-") as folder:
        result = run(args.recipe, args.every, args.rounds, args.n, loop, Path(folder))
    for k, figures in result["by_reference_every"].items():
        rounds = ", ".join(
            f"{r['within_10pct']}% ({r['build_seconds']} s, noise {r['noise_pct']}%)" for r in figures["rounds"]
        )
        print(f"reference_every {k}: within ±10% of the plain loop {rounds}")
    print(f"plain loop's own retest within ±10%: {result['retest_within_10pct']}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
