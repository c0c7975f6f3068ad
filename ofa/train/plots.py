"""Training curves from ``metrics.jsonl``: loss, validation accuracy, learning rate, noise scale."""

from __future__ import annotations

import json
from pathlib import Path

from matplotlib.figure import Figure

from ofa.utils.io import atomic_write


def read_metrics(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a killed process
    return rows


def plot_training_curves(metrics_path: str | Path, png_path: str | Path) -> Path | None:
    """Write a 2x2 figure (x axis: epochs over all phases; dashed lines mark phase starts)."""
    rows = read_metrics(metrics_path)
    epochs = [r for r in rows if r.get("kind") == "epoch"]
    if not epochs:
        return None
    evals = [r for r in rows if r.get("kind") == "eval"]
    fig = Figure(figsize=(12, 8))  # no pyplot: no global figure state, no GUI backend
    axes = fig.subplots(2, 2)
    (ax_loss, ax_acc), (ax_lr, ax_noise) = axes
    x = [r["global_epoch"] for r in epochs]
    ax_loss.plot(x, [r["loss"] for r in epochs], marker=".")
    ax_loss.set(title="training loss (mean over subnets)", xlabel="epoch", ylabel="loss")
    if evals:
        # Each evaluation lists the phase's largest subnet first and its smallest last.
        ex = [r["global_epoch"] for r in evals]
        accs = [[v["top1"] for v in r["subnets"].values()] for r in evals]
        ax_acc.fill_between(ex, [min(a) for a in accs], [max(a) for a in accs], alpha=0.2, label="range over subnets")
        ax_acc.plot(ex, [a[0] for a in accs], marker="o", ms=3, label="largest of the phase")
        ax_acc.plot(ex, [a[-1] for a in accs], marker="o", ms=3, label="smallest of the phase")
        ax_acc.plot(ex, [sum(a) / len(a) for a in accs], ls="--", lw=1, label="mean over evaluated subnets")
        ax_acc.legend(fontsize=7)
    ax_acc.set(title="validation top-1 (BN recalibrated)", xlabel="epoch", ylabel="top-1 (%)")
    ax_lr.plot(x, [r["lr"] for r in epochs], marker=".")
    ax_lr.set(title="learning rate (end of epoch)", xlabel="epoch", ylabel="lr")
    noise = [
        (r["global_epoch"], r["noise_scale"]["b_simple"])
        for r in epochs
        if r.get("noise_scale") and r["noise_scale"].get("b_simple") is not None
    ]
    if noise:
        ax_noise.plot(*zip(*noise), marker=".")
    ax_noise.set(title="gradient noise scale B_simple (critical batch size)", xlabel="epoch", ylabel="samples")
    starts = {}
    for r in epochs:
        starts.setdefault(r["phase"], r["global_epoch"] - 1)
    for ax in axes.flat:
        for name, start in starts.items():
            ax.axvline(start, color="grey", ls="--", lw=0.7)
            ax.text(
                start,
                0.98,
                f" {name}",
                transform=ax.get_xaxis_transform(),
                fontsize=7,
                va="top",
                color="grey",
                rotation=90,
            )
    fig.tight_layout()
    return atomic_write(png_path, lambda p: fig.savefig(p, dpi=100, format="png"))
