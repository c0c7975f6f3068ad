"""What a time-sized timing keeps: each model's blocks, and the reference of paired timings with the ratios
of the models timed against it (`ofa.lut.timing.Standalone`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ofa.lut.stats import Stats, quantile_stats, repeat_stats
from ofa.runtime.runtimes import Runner


@dataclass
class Blocks:
    """One model's blocks so far: (figure, counts) each, the seconds spent, the call count of the next one."""

    figures: list[tuple[float, bool]] = field(default_factory=list)
    seconds: float = 0.0
    calls: int = 1
    steal: int = 0  # blocks left out because the host stole CPU time during them
    started: float | None = None  # perf_counter at the start of the first block
    span: float = 0.0  # seconds from the start of the first block to the end of the last

    @property
    def kept(self) -> list[float]:
        """The figures of the blocks that count."""
        return [f for f, counts in self.figures if counts]


@dataclass
class PairedReference:
    """The reference model of paired timings, its blocks over all of them, and each model's ratios and blocks."""

    name: str
    runner: Runner
    state: Blocks
    ratios: dict[str, list[float]] = field(default_factory=dict)
    states: dict[str, Blocks] = field(default_factory=dict)


def paired_stats(ratios: list[float], ref: Stats, state: Blocks, quantile: float) -> Stats:
    """The median ratio times the reference's figure; its interval combines both; the spread is the model's own
    blocks' (the host's burstiness, a diagnostic). Under 2 ratios (mostly disturbed): its own ``quantile``, measured
    but with no confidence."""
    own = state.kept or [f for f, _ in state.figures]
    if len(ratios) < 2:
        return unsure_stats(own, quantile, state.steal)
    r = quantile_stats(ratios, 0.5)
    figure = r["mean_ms"] * float(ref["mean_ms"])
    return {
        **repeat_stats(own),
        "mean_ms": figure,
        "median_ms": float(np.median(own)),
        "count": len(ratios),
        "ci_low_ms": r["ci_low_ms"] * float(ref["mean_ms"]),
        "ci_high_ms": r["ci_high_ms"] * float(ref["mean_ms"]),
        "ci_pct": math.hypot(r["ci_pct"], float(ref["ci_pct"])),
        "ratio": r["mean_ms"],
        "steal_blocks": state.steal,
    }


def unsure_stats(figures: list[float], quantile: float, steal: int) -> Stats:
    """The ``quantile`` of blocks too disturbed to judge: measured, with no confidence (interval and spread 100%)."""
    return {**quantile_stats(figures, quantile), "ci_pct": 100.0, "spread_pct": 100.0, "steal_blocks": steal}
