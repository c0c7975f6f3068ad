"""``ofa search``: the most accurate subnet per latency budget on one device, plus the Pareto front."""

from __future__ import annotations

import argparse
import math
import re
import sys

from ofa.commands._flags import add_flags, flag_values
from search.find import search_files
from search.search_config import EvolutionConfig, SearchConfig

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}


def count(text: str) -> float:
    """A count such as 300M, 1.5G, 600k or 2e8 (argparse type)."""
    m = re.fullmatch(r"\s*([0-9.]+(?:e[+-]?[0-9]+)?)\s*([kmg]?)\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (e.g. 300M, 1.5G, 2e8)")
    try:
        value = float(m.group(1)) * _SUFFIX[m.group(2)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (e.g. 300M, 1.5G, 2e8)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of milliseconds")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    e = EvolutionConfig()
    p = subparsers.add_parser(
        "search",
        help="find the most accurate subnet within a latency budget on a device",
        description=f"Evolutionary search (OFA's: population {e.population}, {e.generations} generations, "
        f"{e.parent_ratio:.0%} parents, {e.mutation_ratio:.0%} mutation, the rest crossover) for the subnet "
        "with the highest predicted accuracy whose latency on the table's device is within each budget. "
        "Writes arch_<T>ms.json per budget (predicted_top1, latency_ms, macs, params, lut), pareto.json "
        "and pareto.png (every evaluated subnet that no other beats in accuracy, latency and MACs), "
        "search.json and metrics.jsonl.",
    )
    p.add_argument("--supernet", required=True, metavar="CKPT", help="supernet file or training checkpoint")
    p.add_argument("--predictor", required=True, metavar="P.pt", help="accuracy predictor (`ofa predictor fit`)")
    p.add_argument("--lut", required=True, metavar="TABLE.yaml", help="latency table of the device (`ofa lut build`)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: search/ next to the predictor)")
    add_flags(
        p,
        SearchConfig,
        {"targets_ms": {"type": milliseconds}, "max_macs": {"type": count}, "max_params": {"type": count}},
    )
    add_flags(p.add_argument_group("evolution (defaults: the official OFA EvolutionFinder)"), EvolutionConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    evolution = EvolutionConfig(**flag_values(EvolutionConfig, args))
    cfg = SearchConfig(**flag_values(SearchConfig, args), evolution=evolution)
    found = search_files(args.supernet, args.predictor, args.lut, cfg, args.out)
    if found.note:
        print(f"note: {found.note}", file=sys.stderr)
    result, paths = found.result, found.paths
    what = "INT8 top-1" if cfg.dtype == "int8" else "top-1"
    for t in result.targets:
        e = t.arch.extra
        print(
            f"{t.target_ms:g} ms: predicted {what} {e['predicted_top1']:.2f}%, latency {e['latency_ms']:.3f} ms, "
            f"{e['macs'] / 1e6:.1f}M MACs, {e['params'] / 1e6:.2f}M params, {t.arch.short()} "
            f"-> {paths[f'arch_{t.target_ms:g}ms']}"
        )
    print(
        f"Pareto front: {len(result.front)} of {result.evaluated} evaluated subnets -> {paths['pareto_json']}, "
        f"{paths['pareto_png']}"
    )
    return 0
