"""Pareto front of searched subnets: more accurate, faster and cheaper cannot all improve at once.

One search evaluates tens of thousands of subnets; its non-dominated set (accuracy up, latency
down, MACs down) answers other budgets without searching again (`ParetoFront.best_under`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ofa.families.family import Arch, Space
from ofa.families.registry import layout_of
from ofa.utils.io import atomic_write, write_json

BLOCK = 256


def non_dominated(costs: np.ndarray) -> np.ndarray:
    """Indices of the rows of ``costs`` (n, k; smaller is better) that no other row dominates.

    Rows are swept in lexicographic order, where a dominator always comes first, in blocks checked
    against the front found so far: vectorized, and linear in n for fronts much smaller than n. The
    comparisons go one objective at a time over (block, front) matrices (a reduction over an axis of
    k = 3 would be slower than the comparisons themselves).
    """
    costs = np.asarray(costs, dtype=np.float64)
    order = np.lexsort(costs.T[::-1])
    front = np.zeros((0, costs.shape[1]))
    kept: list[np.ndarray] = []
    for start in range(0, len(order), BLOCK):
        idx = order[start : start + BLOCK]
        block = costs[idx]
        survive = ~_dominated(block, front).any(1)
        idx, block = idx[survive], block[survive]
        survive = ~_dominated(block, block).any(1)
        kept.append(idx[survive])
        front = np.concatenate([front, block[survive]])
    return np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)


def _dominated(points: np.ndarray, by: np.ndarray) -> np.ndarray:
    """(len(points), len(by)): whether ``by[j]`` dominates ``points[i]`` (no worse anywhere, better somewhere)."""
    le = np.ones((len(points), len(by)), dtype=bool)
    lt = np.zeros_like(le)
    for j in range(points.shape[1]):
        p, b = points[:, j, None], by[None, :, j]
        le &= b <= p
        lt |= b < p
    return le & lt


@dataclass
class ParetoFront:
    """Non-dominated subnets (gene rows) with their predicted top-1 and costs, sorted by latency."""

    space: Space
    rows: np.ndarray
    top1: np.ndarray
    latency_ms: np.ndarray
    macs: np.ndarray
    params: np.ndarray

    @classmethod
    def from_evaluated(
        cls,
        space: Space,
        rows: np.ndarray,
        top1: np.ndarray,
        latency_ms: np.ndarray,
        macs: np.ndarray,
        params: np.ndarray,
    ) -> ParetoFront:
        """The front of everything evaluated (distinct canonical rows, so a subnet appears once)."""
        rows = np.asarray(rows, dtype=np.int64)
        keep = non_dominated(np.stack([-top1, latency_ms, macs], 1))
        keep = keep[np.lexsort((-top1[keep], latency_ms[keep]))]
        return cls(space, rows[keep], top1[keep], latency_ms[keep], macs[keep], params[keep])

    def __len__(self) -> int:
        return len(self.top1)

    def arch(self, i: int) -> Arch:
        """Front member ``i`` with its predicted top-1, latency, MACs and params as extras."""
        return (
            layout_of(self.space)
            .decode(self.rows[i])
            .with_extra(
                {
                    "predicted_top1": float(self.top1[i]),
                    "latency_ms": float(self.latency_ms[i]),
                    "macs": int(self.macs[i]),
                    "params": int(self.params[i]),
                }
            )
        )

    def best_under(
        self, latency_ms: float, max_macs: float | None = None, max_params: float | None = None
    ) -> Arch | None:
        """Most accurate front member within the budgets (None if nothing fits)."""
        ok = self.latency_ms <= latency_ms
        if max_macs is not None:
            ok &= self.macs <= max_macs
        if max_params is not None:
            ok &= self.params <= max_params
        if not ok.any():
            return None
        return self.arch(int(np.flatnonzero(ok)[np.argmax(self.top1[ok])]))

    def latency_front(self) -> np.ndarray:
        """Indices of the accuracy-vs-latency staircase (2-D front) within this front."""
        idx = non_dominated(np.stack([-self.top1, self.latency_ms], 1))
        return idx[np.argsort(self.latency_ms[idx], kind="stable")]

    def to_dict(self, lut: str | None = None) -> dict[str, Any]:
        """JSON form; ``lut`` names the latency table the latencies come from."""
        return {
            "objectives": {"predicted_top1": "max", "latency_ms": "min", "macs": "min"},
            "space": self.space.fingerprint(),
            "lut": lut,
            "count": len(self),
            "points": [self.arch(i).to_dict() for i in range(len(self))],
        }

    def save(self, path: str | Path, lut: str | None = None) -> Path:
        return write_json(path, self.to_dict(lut))


def plot_front(
    front: ParetoFront,
    path: str | Path,
    chosen: list[Arch] = (),
    targets_ms: list[float] = (),
    cloud: tuple[np.ndarray, np.ndarray] | None = None,
    history: dict[str, np.ndarray] | None = None,
    title: str = "",
) -> Path:
    """PNG: front (colour = MACs) over a cloud of evaluated subnets, picks per budget, convergence."""
    ncols = 2 if history else 1
    fig = Figure(figsize=(6.5 * ncols, 4.8))  # no pyplot: no global figure state, no GUI backend
    axes = fig.subplots(1, ncols, squeeze=False)
    ax = axes[0, 0]
    if cloud is not None and len(cloud[0]):
        ax.scatter(cloud[0], cloud[1], s=3, c="0.82", label="evaluated", rasterized=True)
    sc = ax.scatter(front.latency_ms, front.top1, c=front.macs / 1e6, s=10, cmap="viridis", label="Pareto front")
    fig.colorbar(sc, ax=ax, label="MMACs")
    stair = front.latency_front()
    ax.step(front.latency_ms[stair], front.top1[stair], where="post", color="k", lw=1, label="accuracy vs latency")
    for t in targets_ms:
        ax.axvline(t, color="tab:red", ls=":", lw=0.8)
    if chosen:
        ax.scatter(
            [a.extra["latency_ms"] for a in chosen],
            [a.extra["predicted_top1"] for a in chosen],
            marker="*",
            s=160,
            color="tab:red",
            edgecolor="k",
            zorder=5,
            label="chosen per budget",
        )
    ax.set_xlabel("predicted latency (ms)")
    ax.set_ylabel("predicted top-1 (%)")
    ax.set_title(title or "Pareto front")
    ax.legend(loc="lower right", fontsize=8)
    if history:
        hx = axes[0, 1]
        for label, curve in history.items():
            hx.plot(np.arange(len(curve)), curve, label=label)
        hx.set_xlabel("generation")
        hx.set_ylabel("best predicted top-1 (%)")
        hx.set_title("evolution")
        hx.legend(fontsize=8)
    fig.tight_layout()
    return atomic_write(path, lambda p: fig.savefig(p, dpi=120, format="png"))
