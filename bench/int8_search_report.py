"""`bench.int8_search`'s report as text: for its own output and for `bench/RESULTS.md` (no heavy imports)."""

from __future__ import annotations

from typing import Any


def render(report: dict[str, Any]) -> str:
    """The per-budget table, then the INT8 table's check and the predictors' fits."""
    lines = [
        "| budget ms | float32 pick (quantized) | INT8 ms | INT8 top-1 | INT8 pick | INT8 ms | INT8 top-1 | "
        "Δ top-1 (paired) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["budgets"]:
        f, q = r["float32"], r["int8"]
        same = " (the same subnet)" if r["same_subnet"] else ""
        lines.append(
            f"| {r['budget_ms']:g} | {f['arch']} | {f['measured_int8_ms']:.3f} | {f['top1_int8']:.2f} | "
            f"{q['arch']}{same} | {q['measured_int8_ms']:.3f} | {q['top1_int8']:.2f} | "
            f"{r['delta_top1']:+.2f} ± {r['delta_se']:.2f} |"
        )
    check, fits = report["int8_table_check"]["all"], report["predictors"]["fits"]
    lines.append(
        f"\nINT8 table check: {check['within_10pct']:.1f}% of {check['n']} whole INT8 subnets within ±10%, "
        f"Spearman {check['spearman']:.4f}"
    )
    lines.append(
        "predictors (held-out RMSE / Kendall tau): "
        + ", ".join(f"{d} {v['rmse']:.3f} / {v['tau']:.3f}" for d, v in fits.items())
        + f"; INT8 fit on {report['predictors']['int8_target']}"
    )
    return "\n".join(lines)
