"""What a search answers: one constrained evolution (`Evolution`), the pick per latency budget
(`TargetResult`) and the whole search (`SearchResult`) with its saving: arch files, the Pareto front
and its plot, the summary, the per-generation curves (also to TensorBoard through `ofa.utils.tracking`)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ofa.families.family import Arch, Space
from ofa.utils.io import write_json, write_text
from ofa.utils.tracking import log_figures
from search.pareto import ParetoFront, plot_front
from search.search_config import EvolutionConfig


@dataclass
class Evolution:
    """One constrained search: the best subnet, its curve, and every subnet it evaluated."""

    best_row: np.ndarray
    best_top1: float
    history: np.ndarray  # best predicted top-1 among the parents of each generation (+ the final population)
    rows: np.ndarray  # canonical rows of the distinct subnets evaluated, in the order first evaluated
    top1: np.ndarray
    seconds: float


@dataclass
class TargetResult:
    """The answer for one latency budget."""

    target_ms: float
    arch: Arch  # extras: predicted_top1, latency_ms, macs, params (+ lut when saved)
    history: np.ndarray
    seconds: float


@dataclass
class SearchResult:
    """Per-budget picks plus the Pareto front of everything the searches evaluated."""

    space: Space
    targets: list[TargetResult]
    front: ParetoFront
    cloud: tuple[np.ndarray, np.ndarray]  # (latency_ms, top1) of a sample of evaluated subnets, for the plot
    config: EvolutionConfig
    seed: int
    max_macs: float | None = None
    max_params: float | None = None
    evaluated: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "config": asdict(self.config),
            "space": self.space.fingerprint(),
            "max_macs": self.max_macs,
            "max_params": self.max_params,
            "evaluated": self.evaluated,
            "pareto_size": len(self.front),
            **self.meta,
            "targets": [
                {"target_ms": t.target_ms, "seconds": round(t.seconds, 4), **t.arch.to_dict()} for t in self.targets
            ],
        }

    def save(self, out_dir: str | Path, lut: str | None = None, space: Space | None = None) -> dict[str, Path]:
        """arch_<T>ms.json per budget, pareto.json/png, search.json, metrics.jsonl (per-generation best).

        Each arch file carries the fingerprint of ``space`` (default: the searched space; pass the
        supernet's space when the search ran on its resolutions that a latency table measured).
        """
        out = Path(out_dir)
        extra = {"lut": lut} if lut else {}
        stamp = (space or self.space).stamp
        paths: dict[str, Path] = {}
        for t in self.targets:
            arch = stamp(t.arch).with_extra({**extra, "target_ms": t.target_ms})
            paths[f"arch_{t.target_ms:g}ms"] = arch.save(out / f"arch_{t.target_ms:g}ms.json")
        paths["pareto_json"] = self.front.save(out / "pareto.json", lut)
        paths["pareto_png"] = plot_front(
            self.front,
            out / "pareto.png",
            chosen=[t.arch for t in self.targets],
            targets_ms=[t.target_ms for t in self.targets],
            cloud=self.cloud,
            history={f"{t.target_ms:g} ms": t.history for t in self.targets},
            title=f"Pareto front ({len(self.front)} of {self.evaluated} subnets)",
        )
        paths["summary"] = write_json(out / "search.json", {**self.summary(), "lut": lut})
        lines = [
            json.dumps({"target_ms": t.target_ms, "generation": g, "best_top1": float(v)})
            for t in self.targets
            for g, v in enumerate(t.history)
        ]
        paths["metrics"] = write_text(out / "metrics.jsonl", "\n".join(lines) + "\n")
        board = log_figures(
            out / "tensorboard", self._curves(), {"search": self._table()}, lambda text: print(text, file=sys.stderr)
        )
        return {**paths, **({"tensorboard": board} if board else {})}

    def _curves(self) -> dict[str, list[float]]:
        """Best predicted top-1 per generation, one curve per budget (TensorBoard)."""
        return {f"search/best_top1/{t.target_ms:g}ms": [float(v) for v in t.history] for t in self.targets}

    def _table(self) -> list[list[Any]]:
        """The picks as a table whose first row names the columns (TensorBoard)."""
        rows: list[list[Any]] = [["target ms", "predicted top-1 (%)", "latency ms", "MACs", "params", "arch"]]
        for t in self.targets:
            e = t.arch.extra
            rows.append(
                [
                    f"{t.target_ms:g}",
                    f"{e['predicted_top1']:.2f}",
                    f"{e['latency_ms']:.3f}",
                    e["macs"],
                    e["params"],
                    t.arch.short(),
                ]
            )
        return rows
