"""Latency measurement: what a user measures, for single layers, whole subnets and exported models.

A user's latency budget is the wall-clock time of one model running on its own, warm, as vendor tools
measure it (``onnxruntime_perf_test``, ``benchmark_app``): the same model called again and again, the
wall clock read around each call. The default `Standalone` protocol measures exactly that: each model
gets blocks of back-to-back calls (a few untimed ones first, so it runs warm), the models in a new
shuffled order every round of blocks, and a block's figure is its median call.

A shared host's noise comes in bursts (another tenant's job, the hypervisor taking the CPU away) that
last longer than a short block, so a burst lifts whole blocks, and the spread of the block medians is
the host's, which no number of blocks shrinks. The ``estimator="quantile"`` rule is
built for that:

- first, every model is called in turn, untimed, for ``burn_in_s``: models just loaded (after quantizing
  them) run slower for a second or so, long enough for a set of a few models to meet its stopping rule
  inside that stretch;
- a block lasts at least ``block_ms`` (its call count sized from the model's last block), so one block
  spans the short bursts instead of sitting inside one;
- the figure is a low quantile (``quantile``, q25) of the kept block medians: bursts only ever slow a
  call down, so the lower blocks are the ones the burst missed, and a low quantile is stable where a
  median follows the share of time the host was busy;
- blocks are added, in rounds over the models not yet done, until the figure's own 95% confidence
  interval (order statistics of the block medians: it narrows as blocks are added, whatever the host's
  spread) is within ``target_pct`` of it, after at least ``blocks`` kept blocks and up to ``budget_s``
  seconds of timing per model, and not before its blocks span ``span_s`` seconds of wall clock: a burst can
  last longer than a short run of blocks, whose figures then agree with each other and meet the rule (the
  demo's exported models, timed one by one, read far above the same models timed again). Among many
  models timed in rounds the span comes by itself; one model timed alone spends it;
- a block during which the host stole CPU time (``steal`` in ``/proc/stat``) is left out, as is a call
  the OS preempted (on one CPU thread: wall time well above the thread's CPU time; OpenVINO, which infers
  on its own worker thread, against the process's CPU time); a block with fewer than ``MIN_CLEAN`` of its
  calls left does not count.

Where the bursts outlast a model's blocks altogether (a shared Xeon VM here: the thread's own CPU time, not
only the wall clock, swings for seconds at a time, with no steal), a model's own low quantile reads
whichever spell its blocks fell in, with a tight interval. The default estimator (``estimator="paired"``,
for any set of two or more models) times a reference model (the set's longest call: the largest working set,
which the host's bursts slow the most, as they do whole subnets) in a block right before and after every
other model's block: a burst slows both alike, so the model's block over the reference blocks around it
holds still where each figure swings (`bench.host_bursts` measures both spreads). A model's figure is the
median of its ratios times the reference's low quantile (``reference_quantile``, q10 of its blocks, which
span the whole timing), and its interval combines both. Blocks are added until the ratio's interval is
within ``target_pct``; the reference is then timed on alone until the timing has lasted ``reference_span_s``
in all (longer than the host's bursts) and while its own interval is wider (up to ``reference_budget_s``
more), so that its quiet figure comes from outside any burst. ``reference_every`` > 1 times that many model
blocks between two reference blocks, each model's ratio to the two around its group: less of the timing goes to
the reference. One model alone is timed with the quantile rule above.

What a model's timing reports: ``mean_ms`` (the figure), ``ci_pct`` (the half-width of its 95% interval,
% of the figure: the measurement's noise, `noise_pct` of the judged models), ``spread_pct`` (the block
medians' interquartile range in % of their median, the host's burstiness: a diagnostic), ``count``
(kept blocks) and ``steal_blocks``. Tables from before this estimator name none in ``meta.protocol``
and read as ``estimator="median"``: ``blocks`` blocks of ``calls`` calls, the median block, which stays
available.

The older interleaved rounds are `ofa.lut.interleaved`'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from ofa.lut.blocks import Blocks, PairedReference, paired_stats, unsure_stats
from ofa.lut.stats import Stats, block_figure, block_ratio, blocks_stats, host_steal_ticks, quantile_stats
from ofa.runtime.runtimes import Runner
from ofa.utils.errors import OFAError

CLOCK_NAMES = {"wall": "wall", "thread": "thread-cpu-time"}
WARN_NOISE_PCT = 5.0  # noise above which a build or check warns (a strict --max-noise refuses instead)
NOISE_CRITERION = (
    "half-width of the 95% confidence interval of a whole subnet's latency figure (order statistics of its "
    "block medians), % of the figure, worst of the probe and calibration subnets; spread_pct beside it: the "
    "block medians' interquartile range / median (the host's burstiness, which more blocks do not shrink)"
)
RETRY_PASSES = 5  # median estimator: extra passes over the models with blocks that did not count
MAX_CALLS_PER_BLOCK = 20_000  # a block of a model whose calls read ~0 ms stays finite
MAX_BLOCKS = 400  # blocks of one model at the most, whatever the budget
ESTIMATORS = {
    "quantile": "a low quantile of time-sized blocks' median calls, blocks added until its 95% interval "
    "is within target_pct; blocks with host steal and preempted calls left out",
    "median": "median over blocks of the median call",
    "paired": "the median ratio of a model's time-sized blocks to the reference model's blocks around them, times "
    "the reference's low quantile over the whole timing; blocks with host steal and preempted calls left out",
}


def check_fields(protocol: Any, least: Mapping[str, int], clocks: Sequence[str]) -> None:
    """One clear line for a setting out of range (``protocol.NAME: ...``)."""
    for name, low in least.items():
        value = getattr(protocol, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise OFAError(f"protocol.{name}: expected an integer >= {low}, got {value!r}")
    if protocol.clock not in clocks:
        raise OFAError(
            f"protocol.clock: {protocol.clock!r} is not one of {list(clocks)} for the {protocol.kind} protocol"
        )


@dataclass(frozen=True)
class Standalone:
    """Each model on its own, warm, on the wall clock (see module doc); stored in a table's meta."""

    warmup: int = 10  # untimed calls before every block (quantile: at most a quarter of the block, at least 1)
    calls: int | None = None  # median: timed calls per block (50); quantile: least timed calls per block (3)
    blocks: int | None = None  # median: blocks per model (7); quantile: least kept blocks per model (15)
    clock: str = "wall"  # wall, preempted calls left out; or "thread": the calling thread's CPU time, all calls
    seed: int = 0  # order of the shuffled blocks
    estimator: str = "paired"  # or "quantile" (one model alone always is), or "median" (tables that name none)
    block_ms: float = 20.0  # quantile: least duration of a block
    quantile: float = 0.25  # quantile: the figure is this quantile of the kept block medians
    reference_quantile: float = 0.1  # paired: the reference's figure, this quantile of its (many) blocks
    reference_span_s: float = 10.0  # paired: least seconds of timing in all (the reference timed on alone if
    # the others took less): longer than the host's bursts, so that the reference's low quantile is a quiet one
    reference_budget_s: float = 10.0  # paired: and past that, most seconds of it alone while its interval is wider
    # than target_pct
    reference_every: int = 1  # paired: model blocks between two reference blocks (each model's ratio is to the two
    # around its group): 2 spends a third of the timing on the reference instead of half, a little farther from
    # each block, which the host's bursts (longer than a few blocks) barely notice
    target_pct: float = 2.0  # quantile: blocks are added until the figure's 95% half-width is within this %
    budget_s: float = 1.0  # quantile: most seconds of timing per model once its least blocks are in
    burn_in_s: float = 1.0  # quantile: untimed round-robin calls of every model first (see `_burn_in`)
    span_s: float = 1.0  # quantile: least seconds from a model's first block to its last (see module doc)
    kind: ClassVar[str] = "standalone"

    def __post_init__(self) -> None:
        if self.estimator not in ESTIMATORS:
            raise OFAError(f"protocol.estimator: {self.estimator!r} is not one of {list(ESTIMATORS)}")
        quantile = self.estimator != "median"
        if self.calls is None:
            object.__setattr__(self, "calls", 3 if quantile else 50)
        if self.blocks is None:
            object.__setattr__(self, "blocks", 15 if quantile else 7)
        check_fields(self, {"warmup": 0, "calls": 1, "blocks": 1, "reference_every": 1}, ("wall", "thread"))
        bounds = (("block_ms", 0, math.inf), ("quantile", 0, 1), ("reference_quantile", 0, 1))
        bounds += (("target_pct", 0, math.inf),)
        for name, low, high in bounds:
            if not low < getattr(self, name) < high:
                raise OFAError(f"protocol.{name}: expected a number in ({low}, {high}), got {getattr(self, name)!r}")
        for name in ("budget_s", "burn_in_s", "span_s", "reference_span_s", "reference_budget_s"):
            if not getattr(self, name) >= 0:
                raise OFAError(f"protocol.{name}: expected seconds >= 0, got {getattr(self, name)!r}")

    @property
    def repeats(self) -> int:
        return self.blocks

    def progress_total(self, models: int) -> int:
        """What ``measure``'s progress counts to: blocks per model (median) or models done (quantile)."""
        return models if self.estimator == "quantile" else self.blocks

    def clock_name(self, device: str, threads: int) -> str:
        return CLOCK_NAMES[self.clock]

    def describe(self) -> str:
        """The figure in a few words, for model cards and export summaries."""
        if self.estimator == "median":
            return f"median of {self.blocks} blocks"
        return (
            f"q{round(100 * self.quantile)} of at least {self.blocks} blocks of >= {self.block_ms:g} ms, "
            f"95% interval within ±{self.target_pct:g}% or {self.budget_s:g} s per model"
            + (f", spanning >= {self.span_s:g} s" if self.span_s else "")
            + (
                f" (several models timed together: ratios to a reference model's q{100 * self.reference_quantile:g}"
                + (f", a reference block every {self.reference_every} model blocks" if self.reference_every > 1 else "")
                + ")"
                if self.estimator == "paired"
                else ""
            )
        )

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, **asdict(self)}
        if self.estimator == "median":  # the settings a median table has always stored, and nothing more
            out = {k: out[k] for k in ("kind", "warmup", "calls", "blocks", "clock", "seed", "estimator")}
        elif self.estimator == "quantile":  # as quantile tables have stored it
            out = {k: v for k, v in out.items() if not k.startswith("reference_")}
        return {
            **out,
            "figure": ESTIMATORS[self.estimator],
            "preempted_calls": "left out" if self.clock == "wall" else "kept",
        }

    def measure(self, runners: Mapping[str, Runner], progress: Callable[[int], None] | None = None) -> dict[str, Stats]:
        """Time every runner (see module doc); progress advances per round of blocks (median) or per model done."""
        if self.estimator == "median":
            return self._measure_median(runners, progress)
        if self.estimator == "paired" and len(runners) > 1:
            return self._measure_paired(runners, progress)
        return self._measure_quantile(runners, progress)

    def _measure_median(
        self, runners: Mapping[str, Runner], progress: Callable[[int], None] | None
    ) -> dict[str, Stats]:
        names = list(runners)
        rng = np.random.default_rng(self.seed)
        medians: dict[str, list[tuple[float, bool]]] = {name: [] for name in names}

        def block(name: str) -> None:
            runner = runners[name]
            if self.warmup:
                runner.times(self.warmup)
            one_thread = runner.device == "cpu" and runner.threads == 1
            medians[name].append(block_figure(*runner.times(self.calls), self.clock, one_thread))

        for _ in range(self.blocks):
            for i in rng.permutation(len(names)):
                block(names[i])
            if progress:
                progress(1)
        for _ in range(RETRY_PASSES):
            short = [n for n in names if sum(counts for _, counts in medians[n]) < self.blocks]
            for i in rng.permutation(len(short)):
                block(short[i])
        return {name: blocks_stats(m, self.blocks) for name, m in medians.items()}

    def _block(self, runner: Runner, state: Blocks) -> None:
        """One time-sized block of ``runner``: warm-up, timed calls, figure; the next block's call count."""
        steal = host_steal_ticks()
        if state.started is None:
            state.started = time.perf_counter()
        warm = min(self.warmup, max(1, state.calls // 4)) if self.warmup else 0
        warm_ms = runner.times(warm)[0].sum() if warm else 0.0
        wall, cpu = runner.times(state.calls)
        stolen = host_steal_ticks() > steal
        figure, counts = block_figure(wall, cpu, self.clock, runner.device == "cpu" and runner.threads == 1)
        state.steal += bool(stolen and counts)
        state.figures.append((figure, counts and not stolen))
        state.seconds += (warm_ms + wall.sum()) / 1e3
        state.calls = self._calls_per_block(figure)
        state.span = time.perf_counter() - state.started

    def _burn_in(self, runners: Mapping[str, Runner]) -> None:
        """Untimed calls of every model in turn for ``burn_in_s``: models just loaded, after quantizing them,
        run slower for a second or so, and a set of few models would otherwise reach its stopping rule
        inside that stretch (`ofa lut check` times 8 at a time)."""
        end = time.perf_counter() + self.burn_in_s
        while self.burn_in_s > 0:
            for runner in runners.values():
                runner.times(1)
            if time.perf_counter() >= end:
                return

    def _spanned(self, state: Blocks) -> bool:
        """Whether a model's blocks span ``span_s``: one timed alone (or among few) would otherwise end inside
        one burst."""
        return state.span >= self.span_s

    def _calls_per_block(self, call_ms: float) -> int:
        """Calls that last ``block_ms`` at ``call_ms`` each (at least ``calls``)."""
        return int(min(MAX_CALLS_PER_BLOCK, max(self.calls, math.ceil(self.block_ms / max(call_ms, 1e-6)))))

    def _done(self, state: Blocks, ratios: list[float] | None = None) -> bool:
        """Whether a model's timing stops; with ``ratios`` (paired), their median's interval is judged, with no
        span of its own (the reference's blocks span the timing)."""
        kept = state.kept if ratios is None else ratios
        attempts = len(state.figures)
        if attempts >= MAX_BLOCKS:
            return True
        if len(kept) < self.blocks:  # blocks left out are timed again, within bounds
            return attempts >= 4 * self.blocks and state.seconds >= self.budget_s / 4
        if ratios is None and not self._spanned(state):
            return False
        if state.seconds >= self.budget_s:
            return True  # out of time: what was kept stands, with its interval as the noise
        return quantile_stats(kept, self.quantile if ratios is None else 0.5)["ci_pct"] <= self.target_pct

    def _first_blocks(self, runners: Mapping[str, Runner]) -> dict[str, Blocks]:
        """After the burn-in, every model's first block sized from a few calls."""
        states = {name: Blocks() for name in runners}
        self._burn_in(runners)
        for name, runner in runners.items():
            wall = runner.times(max(1, min(self.warmup, 5)))[0]
            states[name].calls = self._calls_per_block(float(np.median(wall)))
        return states

    def _measure_quantile(
        self, runners: Mapping[str, Runner], progress: Callable[[int], None] | None
    ) -> dict[str, Stats]:
        rng = np.random.default_rng(self.seed)
        states = self._first_blocks(runners)
        active = list(runners)
        while active:
            for i in rng.permutation(len(active)):
                self._block(runners[active[i]], states[active[i]])
            finished = [n for n in active if self._done(states[n])]
            active = [n for n in active if n not in finished]
            if progress and finished:
                progress(len(finished))
        return {name: self._stats(state) for name, state in states.items()}

    def _measure_paired(
        self, runners: Mapping[str, Runner], progress: Callable[[int], None] | None
    ) -> dict[str, Stats]:
        """Every model block between two blocks of the reference (the set's longest-call model): the host's
        bursts slow both alike, so their ratio holds still where either figure swings (see module doc)."""
        states = self._first_blocks(runners)
        name = min(states, key=lambda n: states[n].calls)  # the longest call: the largest working set
        reference = PairedReference(name, runners[name], states.pop(name))
        self._pair(reference, {n: runners[n] for n in states}, states, progress)
        return self.finish(reference, progress)

    def reference(self, name: str, runner: Runner) -> PairedReference:
        """A reference for several paired timings in turn (`measure_against` each set, then `finish`): models
        loaded a few at a time, as `ofa lut check` does, all scaled by one low quantile over the whole span."""
        return PairedReference(name, runner, self._first_blocks({name: runner})[name])

    def measure_against(
        self, reference: PairedReference, runners: Mapping[str, Runner], progress: Callable[[int], None] | None = None
    ) -> None:
        """Time ``runners`` paired with ``reference``, which keeps their ratios and blocks until `finish`."""
        self._pair(reference, runners, self._first_blocks(runners), progress)

    def finish(self, reference: PairedReference, progress: Callable[[int], None] | None = None) -> dict[str, Stats]:
        """The reference's low quantile over all its blocks (timed on alone first where the timing was short) and
        every model paired with it: its median ratio times that quantile."""
        timed_s = reference.state.seconds + sum(state.seconds for state in reference.states.values())
        ref_stats = self._reference_stats(reference.runner, reference.state, timed_s)
        if progress:
            progress(1)
        paired = {
            n: paired_stats(reference.ratios[n], ref_stats, state, self.quantile)
            for n, state in reference.states.items()
        }
        return {reference.name: ref_stats} | paired

    def _pair(
        self,
        reference: PairedReference,
        runners: Mapping[str, Runner],
        states: dict[str, Blocks],
        progress: Callable[[int], None] | None,
    ) -> None:
        """Blocks of the models, ``reference_every`` at a time, between blocks of the reference until each model's
        ratios' interval is within target."""
        rng = np.random.default_rng(self.seed + len(reference.states))  # a set paired after others: its own order
        ref, ref_state, every = reference.runner, reference.state, self.reference_every
        ratios: dict[str, list[float]] = {name: [] for name in runners}
        self._block(ref, ref_state)
        active = list(runners)
        while active:
            order = [active[i] for i in rng.permutation(len(active))]
            for group in (order[i : i + every] for i in range(0, len(order), every)):
                for name in group:
                    self._block(runners[name], states[name])
                self._block(ref, ref_state)
                for name in group:
                    ratio = block_ratio(states[name].figures[-1], ref_state.figures[-2:])
                    if ratio is not None:
                        ratios[name].append(ratio)
            finished = [n for n in active if self._done(states[n], ratios[n])]
            active = [n for n in active if n not in finished]
            if progress and finished:
                progress(len(finished))
        reference.ratios.update(ratios)
        reference.states.update(states)

    def _reference_stats(self, ref: Runner, state: Blocks, timed_s: float) -> Stats:
        """The reference's low quantile, timed on alone while all the timing so far (``timed_s``) is shorter than
        ``reference_span_s``, then while its interval is wider than ``target_pct`` (``reference_budget_s`` at the
        most): a burst can outlast the others' blocks, and the quiet figure needs blocks from outside it."""
        start, span = state.seconds, max(0.0, self.reference_span_s - timed_s)
        for _ in range(MAX_BLOCKS):  # a runner whose calls read 0 ms never adds seconds
            alone = state.seconds - start
            if alone >= span:  # the interval (a sort of every block) only once the span is in
                stats = self._stats(state, self.reference_quantile)
                if stats["ci_pct"] <= self.target_pct or alone >= span + self.reference_budget_s:
                    return stats
            self._block(ref, state)
        return self._stats(state, self.reference_quantile)

    def _stats(self, state: Blocks, quantile: float | None = None) -> Stats:
        kept, q = state.kept, self.quantile if quantile is None else quantile
        if 2 * len(kept) >= self.blocks:
            return {**quantile_stats(kept, q), "steal_blocks": state.steal}
        return unsure_stats([f for f, _ in state.figures], q, state.steal)  # mostly disturbed
