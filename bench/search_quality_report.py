"""How `bench.search_quality` shows its figures: the terminal report, the Markdown block that
`bench.run_all` writes into bench/RESULTS.md (from the JSON alone), and the one PNG."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.figure import Figure

from bench.search_quality_metrics import LATENCY_SLACK, RANKS_TAU, REGRET_POINTS
from ofa.utils.io import atomic_write

if TYPE_CHECKING:
    from bench.search_quality_runs import Context


def _f(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None or (isinstance(value, float) and np.isnan(value)) else format(value, spec)


def budget_lines(report: dict[str, Any]) -> list[str]:
    """One Markdown row per budget and search seed (the main predictor size)."""
    lines = [
        "| budget ms | fit of K | best (B1→B2) | seed | found top-1 | regret | ± SE | rank | table ms | measured ms "
        "| over | re-rank top-1 | re-rank regret | cause | test top-1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in report["budgets"]:
        for r in b["rows"]:
            rr = r.get("rerank", {})
            lines.append(
                f"| {b['budget_ms']:g} | {b['fit']} | {_f(b['best_top1'])} | {r['seed']} | {r['top1']:.2f} | "
                f"{_f(r['regret'], '+.2f')} | {_f(r.get('se'))} | {r.get('rank', '-')} | "
                f"{_f(r.get('table_ms'), '.3f')} | {_f(r.get('measured_ms'), '.3f')} | "
                f"{_f(r.get('over_pct'), '+.1f')}% | {_f(rr.get('top1'))} | "
                f"{_f(rr.get('regret'), '+.2f')} | {r['cause']} | {_f(r.get('test_top1'))} |"
            )
    return lines


def curve_lines(report: dict[str, Any]) -> list[str]:
    """The learning curve: one row per predictor data size."""
    lines = [
        "| predictor subnets | collect CPU s | fit CPU s | RMSE (K, on B) | Kendall tau (K) | regret mean | "
        "regret max | within bar | re-rank regret mean | re-rank CPU s per search |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in report["learning_curve"]:
        lines.append(
            f"| {p['size']} | {p['collect_cpu_s']:.0f} | {p['fit_cpu_s']:.0f} | {p['rmse']:.3f} | {p['tau']:.3f} | "
            f"{p['regret_mean']:+.2f} | {p['regret_max']:+.2f} | {p['within_share']:.0%} | "
            f"{_f(p.get('rerank_regret_mean'), '+.2f')} | {_f(p.get('rerank_cpu_s'), '.1f')} |"
        )
    return lines


def markdown(report: dict[str, Any]) -> list[str]:
    """The RESULTS.md block: setting, per-budget table, front share, learning curve, verdict."""
    img, front = report["images"], report["front"]
    verdict = "yes" if report["all_within"] else f"no (causes: {', '.join(report['causes'])})"
    return [
        f"Supernet {report['supernet']} (recipe digest {report['recipe_digest']}), table {report['table']} "
        f"(noise {_f(report['table_noise_pct'], '.1f')}%). K = {report['samples']} random subnets; validation "
        f"halves: A {img['a']} images (predictor data, re-rank), B1 {img['b1']} (picks the best), B2 {img['b2']} "
        f"(scores everything); test {img['test']} images. Search seeds {report['seeds']}; predictor on "
        f"{report['main_size']} subnets.",
        "",
        *budget_lines(report),
        "",
        f"Front: the search's front (up to its measured points, B2) matches or dominates "
        f"{front['share_mean']:.0%} of the K samples' measured front ({front['samples_front']} points, chosen "
        f"on B1, scored on B2); within one SE {front['share_within_se_mean']:.0%}.",
        "",
        f"Learning curve (test-retest tau of the measurement itself, B1 vs B2 over the K: "
        f"{report['truth_retest_tau']:.3f}):",
        "",
        *curve_lines(report),
        "",
        f"Every found subnet within max({REGRET_POINTS} points, 1 SE) of the best and within "
        f"+{LATENCY_SLACK:.0%} of its budget (measured): {verdict}; worst regret {report['regret_max']:+.2f}. "
        f"Plot: {report['png']}.",
        *_caveat(report),
    ]


def _caveat(report: dict[str, Any]) -> list[str]:
    """Said outright when the truth cannot rank the subnets: then a met bar means "within noise", no more."""
    tau = report["truth_retest_tau"]
    if not tau < RANKS_TAU:
        return []
    return [
        "",
        f"Caveat: the measurement ranks the K subnets no better than a test-retest tau of {tau:.3f} (< {RANKS_TAU}): "
        f"their top-1 on B spreads by {report['truth_b_std']:.2f} points (std over the K), below one half's "
        f"standard error ({report['truth_se']:.2f}), so the regrets say each pick is within noise of the best, not "
        "that the search found the best; only more held-out images would tell these subnets apart.",
    ]


def print_report(report: dict[str, Any]) -> None:
    print("\n".join(markdown(report)))


def plot_quality(ctx: Context, report: dict[str, Any], path: Path) -> Path:
    """The K samples (top-1 on B2 vs table latency), their measured front, the found subnets and the budgets."""
    fig = Figure(figsize=(9, 5.5))
    ax = fig.subplots()
    ax.scatter(ctx.truth_latency, ctx.truth_b2, s=6, color="0.7", label=f"K = {len(ctx.truth)} samples (B2)")
    front = report["front"]
    ax.plot(front["samples_front_latency_ms"], front["samples_front_top1"], "-o", color="k", lw=1.0, ms=3,
            label="their front (chosen on B1, scored on B2)")  # fmt: skip
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for k, seed in enumerate(report["seeds"]):
        rows = [r for b in report["budgets"] for r in b["rows"] if r["seed"] == seed]
        color, table_ms, top1 = colors[k % len(colors)], [r["table_ms"] for r in rows], [r["top1"] for r in rows]
        ax.scatter(table_ms, top1, marker="*", s=120, color=color, edgecolor="k", lw=0.5, zorder=3,
                   label=f"found, seed {seed} (x: its measured latency)")  # fmt: skip
        for r in rows:
            if r.get("measured_ms") is not None:
                ax.plot([r["table_ms"], r["measured_ms"]], [r["top1"]] * 2, color=color, lw=0.7)
                ax.scatter([r["measured_ms"]], [r["top1"]], marker="x", s=25, color=color)
    for b in report["budgets"]:
        ax.axvline(b["budget_ms"], color="tab:red", ls=":", lw=0.9)
        if b["best_top1"] is not None:
            ax.scatter([b["best_latency_ms"]], [b["best_top1"]], marker="o", s=40, facecolor="none", edgecolor="k")
    ax.set_xlabel("table latency (ms); dotted: budgets; circles: the best of the K under each")
    ax.set_ylabel("top-1 on validation half B2 (%)")
    ax.set_title(f"search quality: predictor on {report['main_size']} subnets, seeds {report['seeds']}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return atomic_write(path, lambda p: fig.savefig(p, dpi=110, format="png"))
