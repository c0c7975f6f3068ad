"""The pipeline's closing table: one row per exported subnet (from its ``*.export.json``), the budgets it
missed, and the seconds each stage took."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from ofa.export.result import BudgetVerdict
from ofa.families.family import Space
from ofa.families.registry import arch_from_dict


def summary_row(space: Space, result: dict[str, Any], source: Path, target_ms: float) -> dict[str, Any]:
    """One line of the closing table: the budget ``target_ms`` and the export that serves it (its
    ``<name>.export.json``, of ``space``), exported for this budget or for a smaller one that picked the same
    subnet, whose verdict is then judged again against this budget."""
    arch = arch_from_dict(space, result["arch"], str(source))
    latency = result.get("latency_int8" if result.get("table_dtype") == "int8" else "latency_fp32") or {}
    return {
        "target_ms": target_ms,
        "arch": arch.short(),
        "predicted_top1": result.get("predicted_top1"),
        "test_top1": result.get("top1_fp32"),
        "predicted_ms": result.get("predicted_latency_ms"),
        "measured_ms": latency.get("mean_ms"),
        "macs": result.get("macs"),
        "params": result.get("params"),
        "onnx": result.get("onnx_path"),
        "int8_top1": result.get("top1_int8"),
        "table_noise_pct": result.get("table_noise_pct"),
        "budget": rejudged(result.get("budget"), target_ms),
    }


def rejudged(budget: dict[str, Any] | None, target_ms: float) -> dict[str, Any] | None:
    """An export's budget verdict (``BudgetVerdict.to_dict``) against ``target_ms`` instead of its own."""
    if not budget or budget["target_ms"] == target_ms:
        return budget
    verdict = BudgetVerdict(**{f.name: budget[f.name] for f in fields(BudgetVerdict)})
    return replace(verdict, target_ms=target_ms).to_dict()


def budget_cell(budget: dict[str, Any] | None) -> str:
    """``met`` or ``OVER +N%`` (more than the table's and the measurement's noise over the budget)."""
    if not budget:
        return "-"
    return f"OVER {budget['over_pct']:+.0f}%" if budget["over_budget"] else "met"


def budget_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per subnet over its budget, then the table's noise once."""
    lines = [
        f"target {r['target_ms']:g} ms: {r['budget']['line']}"
        for r in rows
        if (r.get("budget") or {}).get("over_budget")
    ]
    noise = [r["table_noise_pct"] for r in rows if r.get("table_noise_pct") is not None]
    if noise:
        lines.append(f"table noise: ±{max(noise):.1f}% (95% interval of its whole subnets' figures, worst resolution)")
    return lines


def format_summary(rows: list[dict[str, Any]]) -> str:
    """Markdown table; it reads well on a terminal too."""

    def num(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    head = ["target ms", "arch", "pred top1 %", "test top1 %", "pred ms", "measured ms", "budget", "MMACs",
            "params (k)", "ONNX"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        cells = [
            num(r["target_ms"], "g"),
            r["arch"],
            num(r["predicted_top1"], ".2f"),
            num(r["test_top1"], ".2f"),
            num(r["predicted_ms"], ".3f"),
            num(r["measured_ms"], ".3f"),
            budget_cell(r.get("budget")),
            num(None if r["macs"] is None else r["macs"] / 1e6, ".2f"),
            num(None if r["params"] is None else r["params"] / 1e3, ".1f"),
            str(r["onnx"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_seconds(seconds: dict[str, float]) -> str:
    """One line: where the run's time went (the summary stage itself is not in it)."""
    parts = ", ".join(f"{name} {value:.1f}" for name, value in seconds.items())
    return f"stage seconds: {parts} (total {sum(seconds.values()):.1f})"
