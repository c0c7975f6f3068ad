"""Latency measurement: what a user measures, for single layers, whole subnets and exported models.

A user's latency budget is the wall-clock time of one model running on its own, warm, as vendor tools
measure it (``onnxruntime_perf_test``, ``benchmark_app``): the same model called again and again, the
wall clock read around each call. The default `Standalone` protocol measures exactly that, and stays
robust on a shared, noisy machine by repetition: each model gets several blocks, each block is
``warmup`` untimed calls then ``calls`` back-to-back timed ones, and its figure is the median call. The
models are timed in a new shuffled order in every block, so a slow minute of the machine hits one block
of many models rather than every block of a few; a model's latency is the median of its block medians.

On a machine shared with other processes a call the OS preempted times them, not the model: its wall
time exceeds the thread's CPU time by far more than the call's own bookkeeping (a model running in
the calling thread alone, i.e. one CPU thread; others keep every call). Such calls are left
out (``PREEMPTED_*``); a block with fewer than ``MIN_CLEAN`` of its calls left does not count, and is
timed again after the regular blocks (at most ``RETRY_PASSES`` passes over the models still short of
blocks: load on a shared machine comes in bursts). On an idle machine no call is left out, and the
figure is exactly a plain wall-clock loop's median.

How far the kept block medians spread is the measurement's own noise: `noise_pct` (their interquartile
range in % of their median, worst of the models judged: a table's whole subnets; 100% for a model that
kept fewer than half its blocks) is what "too noisy to measure" is judged on.

`Interleaved` is the older protocol, kept as an explicit option: shuffled rounds that time every model
once or twice and move on, the quietest half of the rounds kept, on the thread's CPU clock by default
(``clock="auto"``). It predicts its own protocol, which a user does not run: on a shared cache a model
timed between others runs colder, and CPU time leaves out what the OS gave to other processes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
from torch import nn

from ofa.deploy.runtimes import OrtRunner, Runner, backend_device, check_backend, make_runner
from ofa.errors import OFAError
from search.latency import LatencyTable

Stats = dict[str, float | int]  # {mean_ms: the protocol's figure, std_ms, count, spread_pct}
CLOCK_NAMES = {"wall": "wall", "thread": "thread-cpu-time"}
DEFAULT_MAX_NOISE_PCT = 5.0
NOISE_CRITERION = (
    "interquartile range of a whole subnet's repeated figures (block medians), % of their median, "
    "worst of the probe and calibration subnets; 100 where one kept fewer than half its blocks"
)
PREEMPTED_SHARE, PREEMPTED_MIN_MS = 0.05, 0.02  # wall - CPU time above max(5% of the call, 20 us): preempted
MIN_CLEAN = 0.25  # share of a block's calls that must run unpreempted for the block to count
RETRY_PASSES = 5  # extra passes over the models with blocks that did not count


def _check_fields(protocol: Any, least: Mapping[str, int], clocks: Sequence[str]) -> None:
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

    warmup: int = 10  # untimed calls before every block: the model runs warm, as in a user's loop
    calls: int = 50  # timed back-to-back calls per block, each on its own clock reading; block figure: median
    blocks: int = 7  # blocks per model, the models in a new shuffled order each block; figure: median block
    clock: str = "wall"  # wall, preempted calls left out; or "thread": the calling thread's CPU time, all calls
    seed: int = 0  # order of the shuffled blocks
    kind: ClassVar[str] = "standalone"

    def __post_init__(self) -> None:
        _check_fields(self, {"warmup": 0, "calls": 1, "blocks": 1}, ("wall", "thread"))

    @property
    def repeats(self) -> int:
        return self.blocks

    def clock_name(self, device: str, threads: int) -> str:
        return CLOCK_NAMES[self.clock]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            **asdict(self),
            "figure": "median over blocks of the median call",
            "preempted_calls": "left out" if self.clock == "wall" else "kept",
        }

    def measure(self, runners: Mapping[str, Runner], progress: Callable[[int], None] | None = None) -> dict[str, Stats]:
        """Time every runner in ``blocks`` shuffled blocks; progress advances once per block."""
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


@dataclass(frozen=True)
class Interleaved:
    """The older interleaved-rounds protocol (see module doc), kept as an explicit option."""

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
        _check_fields(self, {"warmup": 0, "rounds": 1, "prime": 0, "calls": 1}, ("auto", "wall", "thread"))
        if not 0 <= self.trim < 0.5:
            raise OFAError(f"protocol.trim: must be in [0, 0.5), got {self.trim!r}")
        if not 0 < self.keep <= 1:
            raise OFAError(f"protocol.keep: must be in (0, 1], got {self.keep!r}")

    @property
    def repeats(self) -> int:
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


Protocol = Standalone | Interleaved
PROTOCOLS: dict[str, type[Standalone] | type[Interleaved]] = {"standalone": Standalone, "interleaved": Interleaved}


def protocol_from_dict(d: Any, source: str = "protocol") -> Protocol:
    """The protocol a table's meta names (``kind``: standalone, or interleaved-rounds, which tables from
    before the standalone protocol name or leave out)."""
    if not isinstance(d, Mapping):
        raise OFAError(f"{source}: expected a mapping")
    kinds = {cls.kind: cls for cls in PROTOCOLS.values()}
    cls = kinds.get(str(d.get("kind", Interleaved.kind)))
    if cls is None:
        raise OFAError(f"{source}.kind: {d.get('kind')!r} is not one of {list(kinds)}")
    names = {f.name for f in fields(cls)}
    try:
        return cls(**{k: v for k, v in d.items() if k in names})
    except OFAError as exc:
        raise OFAError(f"{source}: {exc}") from None


def with_overrides(
    protocol: Protocol,
    repeats: int | None = None,
    warmup: int | None = None,
    calls: int | None = None,
    clock: str | None = None,
) -> Protocol:
    """``protocol`` with what a command line asks for (None: keep): repeats are blocks or rounds."""
    changes: dict[str, Any] = {
        k: v for k, v in (("warmup", warmup), ("calls", calls), ("clock", clock)) if v is not None
    }
    if repeats is not None:
        changes["blocks" if isinstance(protocol, Standalone) else "rounds"] = repeats
    return replace(protocol, **changes)


def time_models(
    runners: Mapping[str, Runner], protocol: Protocol, progress: Callable[[int], None] | None = None
) -> dict[str, Stats]:
    """Every runner timed with ``protocol``: name -> stats; progress advances per block or round."""
    return protocol.measure(runners, progress)


# --------------------------------------------------------------------------------- statistics
def block_figure(wall_ms: np.ndarray, cpu_ms: np.ndarray, clock: str, one_thread: bool = True) -> tuple[float, bool]:
    """A block's median call and whether the block counts: on the wall clock, over the calls not preempted.

    A wall-clock block with fewer than ``MIN_CLEAN`` calls left gives its plain median and does not count.
    Only a model running in the calling thread alone (``one_thread``) can be told preempted.
    """
    if clock == "thread":
        return float(np.median(cpu_ms)), True
    if not one_thread:
        return float(np.median(wall_ms)), True
    clean = wall_ms - cpu_ms <= np.maximum(PREEMPTED_SHARE * wall_ms, PREEMPTED_MIN_MS)
    if clean.mean() < MIN_CLEAN:
        return float(np.median(wall_ms)), False
    return float(np.median(wall_ms[clean])), True


def blocks_stats(blocks: Sequence[tuple[float, bool]], wanted: int) -> Stats:
    """`repeat_stats` of the blocks that count; of all of them, with spread 100%, where under half the
    ``wanted`` blocks count."""
    kept = [figure for figure, counts in blocks if counts]
    if 2 * len(kept) < wanted:
        return {**repeat_stats([figure for figure, _ in blocks]), "spread_pct": 100.0}
    return repeat_stats(kept)


def repeat_stats(figures_ms: Sequence[float]) -> Stats:
    """A model's figure from its repeated ones (block medians): median, std, count, and spread (IQR %)."""
    x = np.asarray(figures_ms, dtype=np.float64)
    mid = float(np.median(x))
    q1, q3 = np.percentile(x, [25, 75])
    return {
        "mean_ms": mid,
        "std_ms": float(x.std()),
        "count": len(x),
        "spread_pct": float(100 * (q3 - q1) / mid) if mid > 0 else 0.0,
    }


def noise_pct(stats: Mapping[str, Stats], names: Sequence[str]) -> float:
    """The measurement's noise: the largest spread (`NOISE_CRITERION`) among the models ``names``."""
    return max((float(stats[n]["spread_pct"]) for n in names), default=0.0)


def quiet_rounds(samples_ms: np.ndarray, keep: float) -> np.ndarray:
    """Indices of the ``keep`` share of rounds (columns) with the lowest mean log-slowdown over models."""
    rel = np.log(np.maximum(samples_ms, 1e-12) / np.median(samples_ms, axis=1, keepdims=True))
    n = max(1, round(keep * samples_ms.shape[1]))
    return np.sort(np.argsort(rel.mean(axis=0), kind="stable")[:n])


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


def trimmed_stats(samples_ms: Sequence[float], trim: float) -> Stats:
    """Mean and std after dropping the fastest and slowest ``trim`` share of the samples."""
    x = np.sort(np.asarray(samples_ms, dtype=np.float64))
    cut = int(len(x) * trim)
    kept = x[cut : len(x) - cut] if len(x) - 2 * cut > 0 else x
    return {"mean_ms": float(kept.mean()), "std_ms": float(kept.std()), "count": len(kept)}


# --------------------------------------------------------------------------------- exported models
@dataclass(frozen=True)
class TimingConfig:
    """Where and how ONNX models are timed: an onnxruntime backend, its threads, the protocol."""

    backend: str = "ort-cpu"
    threads: int = 1
    protocol: Protocol = field(default_factory=Standalone)

    def __post_init__(self) -> None:
        if self.backend not in ("ort-cpu", "ort-cuda"):
            raise OFAError(f"measure_onnx needs an onnxruntime backend (ort-cpu or ort-cuda), got {self.backend!r}")
        check_backend(self.backend)
        if self.threads < 1:
            raise OFAError(f"--threads must be positive, got {self.threads}")


def measure_onnx(path: str | Path, input_shape: Sequence[int], cfg: TimingConfig | None = None) -> Stats:
    """Latency of one exported model, standalone by default: ``{mean_ms, std_ms, count, spread_pct}``.

    Raises `OFAError` for a missing file or a model that does not run.
    """
    return measure_onnx_many({"model": (path, input_shape)}, cfg)["model"]


def measure_onnx_many(
    models: Mapping[str, tuple[str | Path | bytes, Sequence[int]]],
    cfg: TimingConfig | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Stats]:
    """Time several ONNX models with one protocol (standalone: each on its own, blocks shuffled)."""
    cfg = cfg or TimingConfig()
    for name, (model, _) in models.items():
        if isinstance(model, str | Path) and not Path(model).is_file():
            raise OFAError(f"{model}: ONNX model not found ({name})")
    device = backend_device(cfg.backend)
    runners = {name: OrtRunner(model, shape, cfg.threads, device) for name, (model, shape) in models.items()}
    return time_models(runners, cfg.protocol, progress)


@dataclass(frozen=True)
class Latency:
    """Measured latency of one exported model (milliseconds per batch) and how it was measured."""

    mean_ms: float  # the protocol's figure (standalone: the median of the block medians)
    std_ms: float
    batch: int
    threads: int
    samples: int  # blocks (standalone) or rounds kept (interleaved)
    source: str  # which protocol, clock and backend


def measure_latencies(
    models: Mapping[str, onnx.ModelProto],
    torch_model: nn.Module,
    shape: tuple[int, ...],
    table: LatencyTable | None = None,
) -> dict[str, Latency]:
    """Time the exported models as a user would: each on its own, warm, on the wall clock.

    The table gives backend, threads and batch, and its settings where it was built standalone (an
    interleaved table is still checked against the standalone figure its predictions are meant for).
    Without a table: onnxruntime CPU, 1 thread, the default `Standalone`. A table measured with a torch
    backend times the static PyTorch model as ``fp32`` (what it predicts) and the ONNX files on
    onnxruntime CPU.
    """
    meta = table.meta if table is not None else {}
    backend = str(meta.get("backend", "ort-cpu"))
    threads = int(meta.get("threads", 1))
    stored = protocol_from_dict(meta["protocol"], "table meta.protocol") if "protocol" in meta else None
    protocol = stored if isinstance(stored, Standalone) else Standalone()
    onnx_backend = backend if backend.startswith("ort") else "ort-cpu"

    def source(on: str) -> str:
        return f"standalone, {CLOCK_NAMES[protocol.clock]} clock, median of {protocol.blocks} blocks, {on}"

    runners, sources = {}, {}
    for name, model in models.items():
        key = name if backend.startswith("ort") else f"{name} (onnx)"
        runners[key] = make_runner(onnx_backend, None, shape, threads, onnx_model=model.SerializeToString())
        sources[key] = source(onnx_backend)
    if not backend.startswith("ort"):
        runners["fp32"] = make_runner(backend, torch_model, shape, threads)
        sources["fp32"] = source(backend)
    stats = time_models(runners, protocol)
    return {
        name: Latency(float(s["mean_ms"]), float(s["std_ms"]), shape[0], threads, int(s["count"]), sources[name])
        for name, s in stats.items()
    }
