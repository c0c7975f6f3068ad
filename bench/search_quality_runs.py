"""One point of `bench.search_quality`'s learning curve: fit a predictor on the first n subnets of the
collection, search with it for every seed, and score what it found (regret, rank, re-rank step; for
the main size also the front, test top-1 and measured latency)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.search_quality_measure import Measurer, measured_latency
from bench.search_quality_metrics import (
    LATENCY_SLACK,
    cause,
    front_indices,
    front_share,
    rank_among,
    split_half_best,
    standard_error,
    within_bar,
)
from ofa.families.family import Arch, Space
from ofa.families.registry import layout_of
from search.evolution import Limit, evolve, unique_rows
from search.find import search_device
from search.latency import LatencyTable
from search.predictor.accuracy_file import AccuracyData
from search.predictor.fit import FitConfig, fit_predictor
from search.predictor.model import AccuracyPredictor, kendall_tau
from search.result import SearchResult
from search.search_config import SearchConfig

if TYPE_CHECKING:
    from bench.search_quality import QualityConfig


@dataclass
class Context:
    """What every learning-curve point shares: the space, table, measurer, K truth subnets and the data."""

    cfg: QualityConfig
    recipe_path: Path
    recipe_key: str
    supernet: Path
    space: Space
    table_path: Path
    table: LatencyTable
    measurer: Measurer
    truth: list[Arch]
    truth_latency: np.ndarray
    truth_b1: np.ndarray
    truth_b2: np.ndarray
    predictor_data: AccuracyData
    collect_cpu_per_subnet: float

    @property
    def truth_b(self) -> np.ndarray:
        """Top-1 on the whole of half B (both quarters, weighted by their image counts)."""
        n1, n2 = self.measurer.sets.counts["b1"], self.measurer.sets.counts["b2"]
        return (self.truth_b1 * n1 + self.truth_b2 * n2) / (n1 + n2)

    def retest_tau(self) -> float:
        """Kendall tau of the K subnets measured on B1 against B2: how much of a ranking the measurement holds."""
        return kendall_tau(self.truth_b1, self.truth_b2)

    def se(self, top1: float) -> float:
        return standard_error(top1, self.measurer.sets.counts["b2"])


def first(data: AccuracyData, n: int) -> AccuracyData:
    """The collection's first ``n`` subnets (its records are in draw order)."""
    halves = tuple(h[:n] for h in data.halves) if data.halves is not None else None
    return AccuracyData(data.space, data.rows[:n], data.top1[:n], halves, data.header)


def found_row(
    ctx: Context, predictor: AccuracyPredictor, seed: int, budget: float, arch: Arch, top1: float
) -> dict[str, Any]:
    """One found subnet against the split-half best of the K under its budget."""
    best = split_half_best(ctx.truth_latency, ctx.truth_b1, ctx.truth_b2, budget)
    if best is None:
        return {"seed": seed, "budget_ms": budget, "top1": top1, "fit": 0, "regret": float("nan"), "within": True,
                "cause": "no sample fits", "arch": arch.to_dict()}  # fmt: skip
    layout = layout_of(ctx.space)
    predicted_best = float(predictor.predict_batch(layout.encode_many([ctx.truth[best.index]]))[0])
    regret, se = best.top1 - top1, ctx.se(top1)
    return {
        "seed": seed,
        "budget_ms": budget,
        "arch": {k: v for k, v in arch.to_dict().items() if k not in ("macs", "params")},
        "top1": top1,
        "best_top1": best.top1,
        "best_index": best.index,
        "fit": best.fit,
        "regret": regret,
        "rank": rank_among(top1, ctx.truth_latency, ctx.truth_b2, budget),
        "se": se,
        "within": within_bar(regret, se),
        "cause": cause(regret, se, float(arch.extra["predicted_top1"]), predicted_best),
        "predicted_best": predicted_best,
    }


def rerank_pool(ctx: Context, predictor: AccuracyPredictor, seed: int, budget: float, found: Arch) -> list[Arch]:
    """The search's final population under ``budget``: the found subnet, then the best by predicted top-1
    of what the budget's own evolution (same seed and rng as `search.evolution.run_search`) evaluated."""
    table = ctx.table.for_space(ctx.space)
    limits = [Limit("latency_ms", budget, table, "latency target")]
    rng = np.random.default_rng([seed, round(budget * 1e6)])
    evo = evolve(table.space, predictor, limits, ctx.cfg.evolution, rng)
    layout = layout_of(table.space)
    rows = layout.canonical(evo.rows)
    keep = unique_rows(rows)
    order = keep[np.argsort(-evo.top1[keep], kind="stable")]
    pool = {layout.decode(layout.canonical(layout.encode(found))[0]): None}
    for i in order:
        if len(pool) >= ctx.cfg.rerank:
            break
        pool.setdefault(layout.decode(rows[i]), None)
    return list(pool)


def rerank(ctx: Context, predictor: AccuracyPredictor, row: dict[str, Any], found: Arch) -> dict[str, Any]:
    """The pool measured on half A, its most accurate kept and scored on B2; the cost is A's measurements."""
    pool = rerank_pool(ctx, predictor, row["seed"], row["budget_ms"], found)
    acc = ctx.measurer.measure(pool, ("a", "b2"), "re-rank (final population on A)")
    i = int(np.argmax(acc["a"]))
    top1 = float(acc["b2"][i])
    return {
        "pool": len(pool),
        "top1": top1,
        "regret": row["best_top1"] - top1 if "best_top1" in row else float("nan"),
        "changed": i != 0,
        "cpu_s": ctx.measurer.cpu_seconds(pool, "a"),
    }


def front_figures(ctx: Context, result: SearchResult, seed: int) -> dict[str, Any]:
    """Up to ``front_points`` of the search's front (evenly along it) scored on B2, and the share of the
    K samples' measured front (chosen on B1, scored on B2) they match or dominate (also within one SE)."""
    front, layout = result.front, layout_of(result.space)
    idx = np.unique(np.linspace(0, len(front) - 1, min(len(front), ctx.cfg.front_points)).round().astype(int))
    archs = [layout.decode(front.rows[i]) for i in idx]
    latency = front.latency_ms[idx]
    top1 = ctx.measurer.measure(archs, ("b2",), f"search front (seed {seed}) on B2")["b2"]
    ref = front_indices(ctx.truth_latency, ctx.truth_b1)
    ref_lat, ref_top1 = ctx.truth_latency[ref], ctx.truth_b2[ref]
    se = ctx.se(float(np.median(ref_top1)))
    return {
        "seed": seed,
        "measured": len(idx),
        "of": len(front),
        "share": front_share(ref_lat, ref_top1, latency, top1),
        "share_within_se": front_share(ref_lat, ref_top1, latency, top1, tol=se),
        "latency_ms": latency.tolist(),
        "top1": top1.tolist(),
    }


def fit(ctx: Context, n: int) -> tuple[AccuracyPredictor, dict[str, Any]]:
    """A predictor on the first ``n`` subnets, its CPU seconds, and its error on the K truth subnets."""
    cpu = time.process_time()
    result = fit_predictor(first(ctx.predictor_data, n), FitConfig(seed=0))
    fit_cpu = time.process_time() - cpu
    predicted = result.predictor.predict_batch(layout_of(ctx.space).encode_many(ctx.truth))
    report = result.report
    return result.predictor, {
        "size": n,
        "collect_cpu_s": n * ctx.collect_cpu_per_subnet,
        "fit_cpu_s": fit_cpu,
        "rmse": float(np.sqrt(np.mean((predicted - ctx.truth_b) ** 2))),
        "tau": kendall_tau(predicted, ctx.truth_b),
        "own_test_rmse": report.rmse,
        "own_test_tau": report.tau,
        "predictor_retest_tau": report.retest_tau_all,  # its data's two halves of A, every subnet
    }


def learning_point(ctx: Context, n: int, budgets: list[float], main: bool) -> dict[str, Any]:
    """Fit on ``n``, search every seed, score the finds (the main size also gets front, test, latency)."""
    cfg, measurer = ctx.cfg, ctx.measurer
    predictor, point = fit(ctx, n)
    rows, archs, fronts = [], [], []
    for seed in cfg.seeds:
        search = SearchConfig(tuple(budgets), seed=seed, evolution=cfg.evolution)
        result, _ = search_device(ctx.space, predictor, ctx.table, search)
        found = [t.arch for t in result.targets]
        top1 = measurer.measure(found, ("b2",), f"found subnets (n={n}, seed {seed}) on B2")["b2"]
        for budget, arch, acc in zip(budgets, found, top1):
            row = found_row(ctx, predictor, seed, budget, arch, float(acc))
            row["table_ms"] = float(arch.extra["latency_ms"])
            if cfg.rerank:
                row["rerank"] = rerank(ctx, predictor, row, arch)
            rows.append(row)
        archs += found
        if main:
            fronts.append(front_figures(ctx, result, seed))
    if main:
        add_test_and_latency(ctx, rows, archs)
        ref = front_indices(ctx.truth_latency, ctx.truth_b1)
        point["front"] = {
            "samples_front": len(ref),
            "samples_front_latency_ms": ctx.truth_latency[ref].tolist(),
            "samples_front_top1": ctx.truth_b2[ref].tolist(),
            "share_mean": float(np.mean([f["share"] for f in fronts])),
            "share_within_se_mean": float(np.mean([f["share_within_se"] for f in fronts])),
            "per_seed": fronts,
        }
    return {**point, **summary(rows), "rows": rows}


def add_test_and_latency(ctx: Context, rows: list[dict[str, Any]], archs: list[Arch]) -> None:
    """Test top-1 (read once, beside) and the measured whole-subnet latency of each found subnet."""
    test = ctx.measurer.measure(archs, ("test",), "test split (found subnets, once)")["test"]
    ms = measured_latency(ctx.table, archs, ctx.cfg.cache)
    for row, t, m in zip(rows, test, ms):
        row.update(
            test_top1=float(t),
            measured_ms=m,
            over_pct=(m / row["budget_ms"] - 1) * 100,
            within_latency=m <= row["budget_ms"] * (1 + LATENCY_SLACK),
        )


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and worst regret over budgets and seeds, the share within the bar, and the re-rank's."""
    regrets = [r["regret"] for r in rows]
    out = {
        "regret_mean": float(np.nanmean(regrets)),
        "regret_max": float(np.nanmax(regrets)),
        "within_share": float(np.mean([r["within"] for r in rows])),
    }
    ranked = [r["rerank"] for r in rows if "rerank" in r]
    if ranked:
        out.update(
            rerank_regret_mean=float(np.nanmean([r["regret"] for r in ranked])),
            rerank_regret_max=float(np.nanmax([r["regret"] for r in ranked])),
            rerank_cpu_s=float(np.mean([r["cpu_s"] for r in ranked])),  # per budget and seed
            rerank_changed=sum(r["changed"] for r in ranked),
        )
    return out


def budget_figures(ctx: Context, main: dict[str, Any], budgets: list[float]) -> list[dict[str, Any]]:
    """The main size's rows grouped by budget, each with the split-half best of the K under it."""
    out = []
    for budget in budgets:
        best = split_half_best(ctx.truth_latency, ctx.truth_b1, ctx.truth_b2, budget)
        out.append(
            {
                "budget_ms": budget,
                "fit": best.fit if best else 0,
                "best_top1": best.top1 if best else None,
                "best_picked_on_b1": best.picked_on if best else None,
                "best_latency_ms": float(ctx.truth_latency[best.index]) if best else None,
                "rows": [r for r in main["rows"] if r["budget_ms"] == budget],
            }
        )
    return out
