"""`bench.int8_search`'s report as text: for its own output and for `bench/RESULTS.md` (no heavy imports)."""

from __future__ import annotations

from typing import Any

from bench.search_quality_metrics import LATENCY_SLACK


def _ms(pick: dict[str, Any], budget: float) -> str:
    return f"{pick['measured_int8_ms']:.3f} ({100 * (pick['measured_int8_ms'] / budget - 1):+.0f}%)"


def _verdicts(report: dict[str, Any]) -> list[str]:
    """How many picks of each search ship within budget + `LATENCY_SLACK` (the search-quality bench's bar), and,
    per budget where the INT8 pick is less accurate, by how many standard errors and where the float32 pick ran."""
    rows = report["budgets"]
    slack = 1 + LATENCY_SLACK
    within = {d: sum(r[d]["measured_int8_ms"] <= slack * r["budget_ms"] for r in rows) for d in ("float32", "int8")}
    lines = [
        f"measured INT8 latency within budget + {LATENCY_SLACK:.0%}: float32 picks {within['float32']}/{len(rows)}, "
        f"INT8 picks {within['int8']}/{len(rows)}"
    ]
    for r in rows:
        if r["delta_top1"] < 0:
            over = 100 * (r["float32"]["measured_int8_ms"] / r["budget_ms"] - 1)
            lines.append(
                f"at {r['budget_ms']:g} ms the INT8 pick is {-r['delta_top1']:.2f} points less accurate "
                f"({-r['delta_top1'] / r['delta_se']:.1f} SE), where the float32 pick runs {over:+.0f}% against "
                "the budget"
            )
    return lines


def render(report: dict[str, Any]) -> str:
    """The per-budget table (measured INT8 ms with its distance to the budget), the verdicts, then the INT8
    table's check and the predictors' fits."""
    lines = [
        "| budget ms | float32 pick (quantized) | INT8 ms (vs budget) | INT8 top-1 | INT8 pick | INT8 ms (vs budget) | "
        "INT8 top-1 | Δ top-1 (paired) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["budgets"]:
        f, q, b = r["float32"], r["int8"], r["budget_ms"]
        same = " (the same subnet)" if r["same_subnet"] else ""
        lines.append(
            f"| {b:g} | {f['arch']} | {_ms(f, b)} | {f['top1_int8']:.2f} | "
            f"{q['arch']}{same} | {_ms(q, b)} | {q['top1_int8']:.2f} | "
            f"{r['delta_top1']:+.2f} ± {r['delta_se']:.2f} |"
        )
    lines += ["", *_verdicts(report)]
    check, fits = report["int8_table_check"]["all"], report["predictors"]["fits"]
    lines.append(
        f"INT8 table check: {check['within_10pct']:.1f}% of {check['n']} whole INT8 subnets within ±10%, "
        f"Spearman {check['spearman']:.4f}"
    )
    lines.append(
        "predictors (held-out RMSE / Kendall tau): "
        + ", ".join(f"{d} {v['rmse']:.3f} / {v['tau']:.3f}" for d, v in fits.items())
        + f"; INT8 fit on {report['predictors']['int8_target']}"
    )
    return "\n".join(lines)
