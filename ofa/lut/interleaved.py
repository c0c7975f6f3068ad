"""The older interleaved-rounds latency protocol, kept as an explicit option (``--protocol interleaved``).

Shuffled rounds that time every model once or twice and move on, the quietest half of the rounds kept, on the
thread's CPU clock by default (``clock="auto"``). It predicts its own protocol, which a user does not run: on
a shared cache a model timed between others runs colder, and CPU time leaves out what the OS gave to other
processes. The default protocol is `ofa.lut.timing.Standalone`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from ofa.lut.stats import Stats, quiet_rounds, repeat_stats, trimmed_stats
from ofa.lut.timing import CLOCK_NAMES, check_fields
from ofa.runtime.runtimes import Runner
from ofa.utils.errors import OFAError


@dataclass(frozen=True)
class Interleaved:
    """The older interleaved-rounds protocol (see module doc)."""

    warmup: int = 10  # untimed calls per model before the first round
    rounds: int = 150  # shuffled, interleaved rounds; each yields one sample per model
    prime: int = 1  # untimed calls right before each sample
    calls: int = 2  # timed back-to-back calls per model per round, averaged into that round's sample
    keep: float = 0.5  # share of rounds kept: the quietest by mean log-slowdown over all models
    trim: float = 0.1  # share of the kept samples dropped at each end before averaging
    clock: str = "auto"  # auto: thread CPU time for 1-thread CPU backends, else wall; or "wall" / "thread"
    seed: int = 0  # order of the shuffled rounds
    kind: ClassVar[str] = "interleaved-rounds"

    def __post_init__(self) -> None:
        check_fields(self, {"warmup": 0, "rounds": 1, "prime": 0, "calls": 1}, ("auto", "wall", "thread"))
        if not 0 <= self.trim < 0.5:
            raise OFAError(f"protocol.trim: must be in [0, 0.5), got {self.trim!r}")
        if not 0 < self.keep <= 1:
            raise OFAError(f"protocol.keep: must be in (0, 1], got {self.keep!r}")

    @property
    def repeats(self) -> int:
        return self.rounds

    def progress_total(self, models: int) -> int:
        """What ``measure``'s progress counts to: rounds."""
        return self.rounds

    def clock_name(self, device: str, threads: int) -> str:
        """What ``clock="auto"`` resolves to: the thread's CPU time where the model runs in this thread alone."""
        if self.clock == "auto":
            return CLOCK_NAMES["thread" if device == "cpu" and threads == 1 else "wall"]
        return CLOCK_NAMES[self.clock]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}

    def measure(self, runners: Mapping[str, Runner], progress: Callable[[int], None] | None = None) -> dict[str, Stats]:
        """Warm every runner up, time all of them in ``rounds`` shuffled rounds, summarize."""
        names = list(runners)
        for name in names:
            if self.warmup:
                runners[name].times(self.warmup)
        rng = np.random.default_rng(self.seed)
        samples: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(self.rounds):
            for i in rng.permutation(len(names)):
                runner = runners[names[i]]
                column = 0 if self.clock_name(runner.device, runner.threads) == "wall" else 1
                if self.prime:
                    runner.times(self.prime)
                samples[names[i]].append(float(runner.times(self.calls)[column].mean()))
            if progress:
                progress(1)
        return summarize(samples, self)


def summarize(samples_ms: Mapping[str, Sequence[float]], protocol: Interleaved) -> dict[str, Stats]:
    """Per-model interleaved stats over the quietest rounds; the spread is that of 5 consecutive chunks."""
    names = list(samples_ms)
    matrix = np.array([samples_ms[n] for n in names], dtype=np.float64)
    kept = quiet_rounds(matrix, protocol.keep)
    out = {}
    for i, n in enumerate(names):
        chunks = [c.mean() for c in np.array_split(matrix[i, kept], min(5, len(kept)))]
        out[n] = {**trimmed_stats(matrix[i, kept], protocol.trim), "spread_pct": repeat_stats(chunks)["spread_pct"]}
    return out
