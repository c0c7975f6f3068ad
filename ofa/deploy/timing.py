"""Latency measurement: one protocol for single layers, whole subnets and exported models.

A single timing pass on a shared CPU is dominated by noise (the same network moves by tens of percent a
minute later). So every model to compare is kept loaded and timed in shuffled, interleaved rounds: each
round times every model once, so slow phases of the machine hit all models alike instead of a few. A
sample is taken warm (``prime`` untimed calls first, then ``calls`` timed ones averaged): that is the
steady state of a model run in a loop, and it does not depend on which models ran before it (timed cold,
it did: the same small subnets timed differently next to layers than next to other subnets). Other processes on
the neighbouring core slow networks whose weights spill out of the private cache by up to 1.5x, layers
much less, so the rounds the machine was busiest in are dropped as a whole (``keep``), and a model's
latency is the trimmed mean over the remaining rounds.

On a CPU backend with one thread the model runs in the calling thread, so the clock (``clock="auto"``) is
that thread's CPU time: it equals wall time on an idle core and leaves out the time the OS gave to other
processes (on this shared 2-core machine two in three 17 ms calls were preempted, inflating wall time by
40%). Other backends use the wall clock (CUDA: events).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from torch import nn

from ofa.deploy.runtimes import OrtRunner, Runner, backend_device, check_backend, make_runner
from ofa.errors import OFAError
from search.latency import LatencyTable

CLOCKS = ("auto", "wall", "thread")
Stats = dict[str, float | int]  # {mean_ms, std_ms, count}


@dataclass(frozen=True)
class Protocol:
    """How every model is timed; stored in a table's meta so checks repeat it exactly."""

    warmup: int = 10  # untimed calls per model before the first round
    rounds: int = 150  # shuffled, interleaved rounds; each yields one sample per model
    prime: int = 1  # untimed calls right before each sample, so every model is timed warm
    calls: int = 2  # timed back-to-back calls per model per round, averaged into that round's sample
    keep: float = 0.5  # share of rounds kept: the quietest by mean log-slowdown over all models
    trim: float = 0.1  # share of the kept samples dropped at each end before averaging
    clock: str = "auto"  # auto: thread CPU time for 1-thread CPU backends, else wall; or "wall" / "thread"
    seed: int = 0  # order of the shuffled rounds

    def __post_init__(self) -> None:
        for name, least in (("warmup", 0), ("rounds", 1), ("prime", 0), ("calls", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise OFAError(f"protocol.{name}: expected an integer >= {least}, got {value!r}")
        if not 0 <= self.trim < 0.5:
            raise OFAError(f"protocol.trim: must be in [0, 0.5), got {self.trim!r}")
        if not 0 < self.keep <= 1:
            raise OFAError(f"protocol.keep: must be in (0, 1], got {self.keep!r}")
        if self.clock not in CLOCKS:
            raise OFAError(f"protocol.clock: {self.clock!r} is not one of {list(CLOCKS)}")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "interleaved-rounds", **asdict(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "protocol") -> Protocol:
        if not isinstance(d, Mapping):
            raise OFAError(f"{source}: expected a mapping")
        names = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in d.items() if k in names})
        except OFAError as exc:
            raise OFAError(f"{source}: {exc}") from None

    def with_overrides(self, rounds: int | None = None, warmup: int | None = None) -> Protocol:
        """This protocol with the rounds and warm-up calls a command line asks for (None: keep)."""
        changes = {k: v for k, v in (("rounds", rounds), ("warmup", warmup)) if v is not None}
        return Protocol.from_dict({**asdict(self), **changes})


# --------------------------------------------------------------------------------- statistics
def quiet_rounds(samples_ms: np.ndarray, keep: float) -> np.ndarray:
    """Indices of the ``keep`` share of rounds (columns) with the lowest mean log-slowdown over models."""
    rel = np.log(np.maximum(samples_ms, 1e-12) / np.median(samples_ms, axis=1, keepdims=True))
    n = max(1, round(keep * samples_ms.shape[1]))
    return np.sort(np.argsort(rel.mean(axis=0), kind="stable")[:n])


def summarize(samples_ms: Mapping[str, Sequence[float]], protocol: Protocol) -> dict[str, Stats]:
    """Per-model ``{mean_ms, std_ms, count}`` over the quietest rounds (all models share the rounds)."""
    names = list(samples_ms)
    matrix = np.array([samples_ms[n] for n in names], dtype=np.float64)
    kept = quiet_rounds(matrix, protocol.keep)
    return {n: trimmed_stats(matrix[i, kept], protocol.trim) for i, n in enumerate(names)}


def trimmed_stats(samples_ms: Sequence[float], trim: float) -> Stats:
    """Mean and std after dropping the fastest and slowest ``trim`` share of the samples."""
    x = np.sort(np.asarray(samples_ms, dtype=np.float64))
    cut = int(len(x) * trim)
    kept = x[cut:len(x) - cut] if len(x) - 2 * cut > 0 else x
    return {"mean_ms": float(kept.mean()), "std_ms": float(kept.std()), "count": len(kept)}


# --------------------------------------------------------------------------------- timing
def clock_for(protocol: Protocol, device: str, threads: int) -> Callable[[], int]:
    """The thread's CPU clock where the model runs in this thread alone (see module doc), else wall."""
    thread = protocol.clock == "thread" or (protocol.clock == "auto" and device == "cpu" and threads == 1)
    return time.thread_time_ns if thread else time.perf_counter_ns


def clock_name(protocol: Protocol, device: str, threads: int) -> str:
    """What ``clock="auto"`` resolves to, for a table's meta."""
    return "thread-cpu-time" if clock_for(protocol, device, threads) is time.thread_time_ns else "wall"


def sample(runner: Runner, protocol: Protocol) -> float:
    """One round's sample: ``prime`` untimed calls, then the mean of ``calls`` timed ones."""
    if protocol.prime:
        runner.timed(protocol.prime)
    return runner.timed(protocol.calls, clock_for(protocol, runner.device, runner.threads))


def time_interleaved(runners: Mapping[str, Runner], protocol: Protocol,
                     progress: Callable[[int], None] | None = None) -> dict[str, Stats]:
    """Warm every runner up, time all of them in ``protocol.rounds`` shuffled rounds, summarize."""
    names = list(runners)
    for name in names:
        if protocol.warmup:
            runners[name].timed(protocol.warmup)
    rng = np.random.default_rng(protocol.seed)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(protocol.rounds):
        for i in rng.permutation(len(names)):
            samples[names[i]].append(sample(runners[names[i]], protocol))
        if progress:
            progress(1)
    return summarize(samples, protocol)


# --------------------------------------------------------------------------------- exported models
@dataclass(frozen=True)
class TimingConfig:
    """Where and how ONNX models are timed: an onnxruntime backend, its threads, the protocol."""

    backend: str = "ort-cpu"
    threads: int = 1
    protocol: Protocol = field(default_factory=Protocol)

    def __post_init__(self) -> None:
        if self.backend not in ("ort-cpu", "ort-cuda"):
            raise OFAError(f"measure_onnx needs an onnxruntime backend (ort-cpu or ort-cuda), got {self.backend!r}")
        check_backend(self.backend)
        if self.threads < 1:
            raise OFAError(f"--threads must be positive, got {self.threads}")


def measure_onnx(path: str | Path, input_shape: Sequence[int], cfg: TimingConfig | None = None) -> Stats:
    """Latency of one exported model with the table protocol: ``{mean_ms, std_ms, count}``.

    A model timed alone gets no interleaving; `measure_onnx_many` times several side by side as
    ``ofa lut check`` does. Raises `OFAError` for a missing file or a model that does not run.
    """
    return measure_onnx_many({"model": (path, input_shape)}, cfg)["model"]


def measure_onnx_many(models: Mapping[str, tuple[str | Path | bytes, Sequence[int]]], cfg: TimingConfig | None = None,
                      progress: Callable[[int], None] | None = None) -> dict[str, Stats]:
    """Time several ONNX models side by side in interleaved rounds: name -> ``{mean_ms, std_ms, count}``."""
    cfg = cfg or TimingConfig()
    for name, (model, _) in models.items():
        if isinstance(model, str | Path) and not Path(model).is_file():
            raise OFAError(f"{model}: ONNX model not found ({name})")
    device = backend_device(cfg.backend)
    runners = {name: OrtRunner(model, shape, cfg.threads, device) for name, (model, shape) in models.items()}
    return time_interleaved(runners, cfg.protocol, progress)


@dataclass(frozen=True)
class Latency:
    """Measured latency of one exported model (milliseconds per batch) and how it was measured."""

    mean_ms: float
    std_ms: float
    batch: int
    threads: int
    samples: int  # timed rounds kept after trimming
    source: str  # whose protocol and which backend


def measure_latencies(models: Mapping[str, onnx.ModelProto], torch_model: nn.Module, shape: tuple[int, ...],
                      table: LatencyTable | None = None) -> dict[str, Latency]:
    """Time the exported models side by side with the table's backend, threads, batch and protocol.

    Without a table: onnxruntime CPU, 1 thread, the default `Protocol`. A table measured with a torch
    backend times the static PyTorch model as ``fp32`` (what it predicts) and the ONNX files on
    onnxruntime CPU under the same protocol.
    """
    meta = table.meta if table is not None else {}
    backend = str(meta.get("backend", "ort-cpu"))
    threads = int(meta.get("threads", 1))
    protocol = Protocol.from_dict(meta["protocol"], "table meta.protocol") if "protocol" in meta else Protocol()
    where = f"table protocol, {backend}" if table is not None else "default protocol, ort-cpu"
    onnx_backend = backend if backend.startswith("ort") else "ort-cpu"
    runners, sources = {}, {}
    for name, model in models.items():
        key = name if backend.startswith("ort") else f"{name} (onnx)"
        runners[key] = make_runner(onnx_backend, None, shape, threads, onnx_model=model.SerializeToString())
        sources[key] = where if backend.startswith("ort") else f"table protocol, {onnx_backend}"
    if not backend.startswith("ort"):
        runners["fp32"] = make_runner(backend, torch_model, shape, threads)
        sources["fp32"] = where
    stats = time_interleaved(runners, protocol)
    return {name: Latency(float(s["mean_ms"]), float(s["std_ms"]), shape[0], threads, int(s["count"]), sources[name])
            for name, s in stats.items()}
