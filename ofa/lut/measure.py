"""Latency of exported models, timed as a user times them (the `Standalone` protocol by default)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from torch import nn

from ofa.lut.protocols import Protocol, protocol_from_dict, time_models
from ofa.lut.stats import Stats
from ofa.lut.timing import CLOCK_NAMES, Standalone
from ofa.runtime.runtimes import OrtRunner, backend_device, check_backend, make_runner
from ofa.utils.errors import OFAError
from search.latency import LatencyTable


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
    ci_pct: float | None = None  # half-width of the figure's 95% interval, % of it (the quantile estimator's)


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

    runners, sources = {}, {}
    for name, model in models.items():
        key = name if backend.startswith("ort") else f"{name} (onnx)"
        runners[key] = make_runner(onnx_backend, None, shape, threads, onnx_model=model.SerializeToString())
        sources[key] = latency_source(protocol, onnx_backend)
    if not backend.startswith("ort"):
        runners["fp32"] = make_runner(backend, torch_model, shape, threads)
        sources["fp32"] = latency_source(protocol, backend)
    stats = time_models(runners, protocol)
    return {name: latency_of(s, shape[0], threads, sources[name]) for name, s in stats.items()}


def latency_source(protocol: Standalone, on: str) -> str:
    """How a latency was measured, as export summaries and model cards say it."""
    return f"standalone, {CLOCK_NAMES[protocol.clock]} clock, {protocol.describe()}, {on}"


def latency_of(stats: Stats, batch: int, threads: int, source: str) -> Latency:
    """A model's timing as the `Latency` an export reports."""
    ci = stats.get("ci_pct")
    return Latency(
        float(stats["mean_ms"]), float(stats["std_ms"]), batch, threads, int(stats["count"]), source,
        float(ci) if ci is not None else None,
    )  # fmt: skip
