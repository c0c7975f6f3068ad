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

Layers are measured exactly as they run in an exported subnet: each module is cut out of a real timm
subnet built by ``ofa.subnet.build_subnet`` and exported with the same ONNX exporter settings.
"""

from __future__ import annotations

import io
import platform
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from ofa.errors import OFAError
from ofa.space import Arch, LayerSpec, SearchSpace

BACKENDS = ("ort-cpu", "torch-cpu", "ort-cuda", "torch-cuda")
CLOCKS = ("auto", "wall", "thread")
OPSET = 17


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

    def with_overrides(self, **overrides: Any) -> Protocol:
        return Protocol.from_dict({**asdict(self), **{k: v for k, v in overrides.items() if v is not None}})


def quiet_rounds(samples_ms: np.ndarray, keep: float) -> np.ndarray:
    """Indices of the ``keep`` share of rounds (columns) with the lowest mean log-slowdown over models."""
    rel = np.log(np.maximum(samples_ms, 1e-12) / np.median(samples_ms, axis=1, keepdims=True))
    n = max(1, round(keep * samples_ms.shape[1]))
    return np.sort(np.argsort(rel.mean(axis=0), kind="stable")[:n])


def summarize(samples_ms: Mapping[str, Sequence[float]], protocol: Protocol) -> dict[str, dict[str, float | int]]:
    """Per-model ``{mean_ms, std_ms, count}`` over the quietest rounds (all models share the rounds)."""
    names = list(samples_ms)
    matrix = np.array([samples_ms[n] for n in names], dtype=np.float64)
    kept = quiet_rounds(matrix, protocol.keep)
    return {n: trimmed_stats(matrix[i, kept], protocol.trim) for i, n in enumerate(names)}


def trimmed_stats(samples_ms: Sequence[float], trim: float) -> dict[str, float | int]:
    """Mean and std after dropping the fastest and slowest ``trim`` share of the samples."""
    x = np.sort(np.asarray(samples_ms, dtype=np.float64))
    cut = int(len(x) * trim)
    kept = x[cut:len(x) - cut] if len(x) - 2 * cut > 0 else x
    return {"mean_ms": float(kept.mean()), "std_ms": float(kept.std()), "count": len(kept)}


# --------------------------------------------------------------------------------- runners
class Runner:
    """One loaded model with a fixed input; ``timed(n, clock)`` returns the mean ms of ``n`` calls."""

    device: str = "cpu"
    threads: int = 1

    def timed(self, calls: int, clock: Callable[[], int] = time.perf_counter_ns) -> float:
        raise NotImplementedError

    def clock(self, protocol: Protocol) -> Callable[[], int]:
        """The thread's CPU clock where the model runs in this thread alone (see module doc), else wall."""
        thread = protocol.clock == "thread" or (protocol.clock == "auto" and self.device == "cpu"
                                                 and self.threads == 1)
        return time.thread_time_ns if thread else time.perf_counter_ns

    def sample(self, protocol: Protocol) -> float:
        """One round's sample: ``prime`` untimed calls, then the mean of ``calls`` timed ones."""
        if protocol.prime:
            self.timed(protocol.prime)
        return self.timed(protocol.calls, self.clock(protocol))


def clock_name(protocol: Protocol, device: str, threads: int) -> str:
    """What ``clock="auto"`` resolves to, for a table's meta."""
    runner = Runner()
    runner.device, runner.threads = device, threads
    return "thread-cpu-time" if runner.clock(protocol) is time.thread_time_ns else "wall"


def check_backend(backend: str) -> None:
    """Refuse an unknown backend, or a CUDA one on a machine without a GPU, with one clear line."""
    if backend not in BACKENDS:
        raise OFAError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if backend.endswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise OFAError(f"backend {backend!r} needs a CUDA GPU, and none is visible here")
        if backend == "ort-cuda":
            import onnxruntime as ort

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise OFAError("backend 'ort-cuda' needs onnxruntime-gpu (CUDAExecutionProvider is not available)")


class OrtRunner(Runner):
    """An onnxruntime session with inputs and outputs bound once (no per-call allocation or copies)."""

    def __init__(self, model: str | Path | bytes, input_shape: Sequence[int], threads: int = 1,
                 device: str = "cpu") -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        providers = ["CUDAExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
        source = str(model) if isinstance(model, str | Path) else model
        try:
            self.session = ort.InferenceSession(source, opts, providers=providers)
        except Exception as exc:  # onnxruntime raises its own exception types for unreadable models
            where = str(model) if isinstance(model, str | Path) else "model"
            raise OFAError(f"{where}: onnxruntime cannot load it: {str(exc).splitlines()[0]}") from None
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            raise OFAError(f"expected a model with one input, got {len(inputs)}")
        x = np.random.default_rng(0).standard_normal(tuple(input_shape)).astype(np.float32)
        self.device, self.threads = device, threads
        self.binding = self.session.io_binding()
        self._input = ort.OrtValue.ortvalue_from_numpy(x, device, 0)
        self.binding.bind_ortvalue_input(inputs[0].name, self._input)
        for out in self.session.get_outputs():
            self.binding.bind_output(out.name, device)
        try:
            self.session.run_with_iobinding(self.binding)  # first call allocates the bound outputs
        except Exception as exc:  # e.g. an input shape the model does not take
            raise OFAError(f"model does not run on input of shape {list(input_shape)}: "
                           f"{str(exc).splitlines()[0]}") from None
        outputs = self.binding.get_outputs()
        for out, value in zip(self.session.get_outputs(), outputs):
            self.binding.bind_ortvalue_output(out.name, value)
        self._outputs = outputs

    def timed(self, calls: int, clock: Callable[[], int] = time.perf_counter_ns) -> float:
        run, binding = self.session.run_with_iobinding, self.binding
        if self.device == "cuda":
            binding.synchronize_inputs()
        t0 = clock()
        for _ in range(calls):
            run(binding)
        if self.device == "cuda":
            binding.synchronize_outputs()
        return (clock() - t0) / 1e6 / calls


class TorchRunner(Runner):
    """A torch module in eval/inference mode; CUDA timings use CUDA events."""

    def __init__(self, module: Any, input_shape: Sequence[int], threads: int = 1, device: str = "cpu") -> None:
        import torch

        if device == "cpu":
            torch.set_num_threads(threads)
        self.torch = torch
        self.device, self.threads = device, threads
        self.module = module.eval().to(device)
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(tuple(input_shape), generator=gen).to(device)
        with torch.inference_mode():
            self.module(self.x)

    def timed(self, calls: int, clock: Callable[[], int] = time.perf_counter_ns) -> float:
        torch = self.torch
        with torch.inference_mode():
            if self.device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(calls):
                    self.module(self.x)
                end.record()
                end.synchronize()
                return start.elapsed_time(end) / calls
            t0 = clock()
            for _ in range(calls):
                self.module(self.x)
            return (clock() - t0) / 1e6 / calls


def time_interleaved(runners: Mapping[str, Runner], protocol: Protocol,
                     progress: Callable[[int], None] | None = None) -> dict[str, dict[str, float | int]]:
    """Warm every runner up, time all of them in ``protocol.rounds`` shuffled rounds, summarize."""
    names = list(runners)
    for name in names:
        if protocol.warmup:
            runners[name].timed(protocol.warmup)
    rng = np.random.default_rng(protocol.seed)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(protocol.rounds):
        for i in rng.permutation(len(names)):
            samples[names[i]].append(runners[names[i]].sample(protocol))
        if progress:
            progress(1)
    return summarize(samples, protocol)


# --------------------------------------------------------------------------------- models
def export_onnx(module: Any, input_shape: Sequence[int], path: str | Path | None = None,
                opset: int = OPSET) -> bytes | Path:
    """Export ``module`` (eval mode) with the classic TorchScript exporter; bytes when no path is given."""
    import torch

    target: Any = io.BytesIO() if path is None else str(path)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.zeros(tuple(input_shape)),), target, dynamo=False,
                          opset_version=opset, input_names=["input"], output_names=["output"],
                          do_constant_folding=True)
    return target.getvalue() if path is None else Path(path)


def empty_onnx(batch: int = 1) -> bytes:
    """An Identity model: its latency is the fixed per-call cost every measured model also pays."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 1])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 1])
    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["output"])], "empty", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model.SerializeToString()


def layer_specs(space: SearchSpace, resolution: int) -> list[LayerSpec]:
    """Every distinct layer config the space runs at ``resolution`` (fixed layers, every block choice)."""
    specs = {layer.key: layer for layer in space.fixed_layers(resolution)}
    for s in range(space.num_stages):
        for j in range(space.max_depth):
            for k in space.kernels:
                for e in space.expands:
                    spec = space.block_spec(resolution, s, j, k, e)
                    specs.setdefault(spec.key, spec)
    return list(specs.values())


class LayerModules:
    """timm modules for every layer config, cut out of real subnets (one per kernel/expand pair).

    Weights do not depend on the resolution, so one subnet per (kernel, expand) with every stage at
    full depth holds a module for every block slot at every resolution.
    """

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self._models: dict[tuple[int, int], Any] = {}

    def _model(self, kernel: int, expand: int) -> Any:
        from ofa.subnet import build_subnet

        if (kernel, expand) not in self._models:
            sp, n = self.space, self.space.num_slots
            arch = Arch(sp.resolutions[0], (sp.max_depth,) * sp.num_stages, (kernel,) * n, (expand,) * n)
            self._models[kernel, expand] = build_subnet(sp, arch).eval()
        return self._models[kernel, expand]

    def module(self, spec: LayerSpec, stage: int = -1, index: int = -1, expand: int = 0) -> Any:
        """The module running ``spec``; blocks need their (stage, index, expand ratio)."""
        from torch import nn

        sp = self.space
        any_model = self._model(sp.kernels[0], sp.expands[0])
        if spec.kind == "stem":
            return nn.Sequential(any_model.conv_stem, any_model.bn1)
        if spec.kind == "first":
            return any_model.blocks[0]
        if spec.kind == "final_expand":
            return any_model.blocks[-1]
        if spec.kind == "head":
            m = any_model
            return nn.Sequential(m.global_pool, m.conv_head, m.norm_head, m.act2, m.flatten, m.classifier)
        return self._model(spec.kernel, expand).blocks[stage + 1][index]

    def for_resolution(self, resolution: int) -> dict[str, tuple[LayerSpec, Any]]:
        """key -> (spec, module) for every distinct layer config at ``resolution``."""
        sp = self.space
        out = {layer.key: (layer, self.module(layer)) for layer in sp.fixed_layers(resolution)}
        for s in range(sp.num_stages):
            for j in range(sp.max_depth):
                for k in sp.kernels:
                    for e in sp.expands:
                        spec = sp.block_spec(resolution, s, j, k, e)
                        if spec.key not in out:
                            out[spec.key] = (spec, self.module(spec, s, j, e))
        return out


def input_shape(spec: LayerSpec, batch: int) -> tuple[int, int, int, int]:
    return (batch, spec.in_c, spec.in_hw, spec.in_hw)


def make_runner(backend: str, module: Any, shape: Sequence[int], threads: int,
                onnx_model: bytes | Path | None = None) -> Runner:
    """A runner for ``module`` on ``backend``; ONNX backends export it unless ``onnx_model`` is given."""
    device = "cuda" if backend.endswith("cuda") else "cpu"
    if backend.startswith("ort"):
        model = onnx_model if onnx_model is not None else export_onnx(module, shape)
        return OrtRunner(model, shape, threads, device)
    return TorchRunner(module, shape, threads, device)


def runtime_info(backend: str) -> dict[str, str]:
    """Runtime name and version, and the processor, for a table's meta."""
    import torch

    if backend.startswith("ort"):
        import onnxruntime as ort

        runtime, version = "onnxruntime", ort.__version__
    else:
        runtime, version = "torch", str(torch.__version__)
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info = {"runtime": runtime, "runtime_version": version, "cpu": cpu}
    if backend.endswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def measure_overhead(backend: str, batch: int, threads: int, protocol: Protocol) -> float:
    """Per-call cost of an empty model in ms (0 for torch backends, which have no session call)."""
    if not backend.startswith("ort"):
        return 0.0
    runner = OrtRunner(empty_onnx(batch), (batch, 1), threads, "cuda" if backend.endswith("cuda") else "cpu")
    return float(time_interleaved({"empty": runner}, protocol)["empty"]["mean_ms"])


def measure_onnx(path: str | Path, input_shape: Sequence[int], *, threads: int = 1, repeats: int = 150,
                 warmup: int = 10, backend: str = "ort-cpu", calls: int = 2, trim: float = 0.1,
                 protocol: Protocol | Mapping[str, Any] | None = None) -> dict[str, float | int]:
    """Latency of one exported model with the table protocol: ``{mean_ms, std_ms, count}``.

    ``protocol`` (e.g. ``table.meta["protocol"]``) overrides repeats/warmup/calls/trim/keep. A model timed
    alone gets no interleaving; ``measure_onnx_many`` times several side by side as ``ofa lut check`` does.
    """
    return measure_onnx_many({"model": (path, input_shape)}, threads=threads, repeats=repeats, warmup=warmup,
                             backend=backend, calls=calls, trim=trim, protocol=protocol)["model"]


def measure_onnx_many(models: Mapping[str, tuple[str | Path | bytes, Sequence[int]]], *, threads: int = 1,
                      repeats: int = 150, warmup: int = 10, backend: str = "ort-cpu", calls: int = 2,
                      trim: float = 0.1, protocol: Protocol | Mapping[str, Any] | None = None,
                      progress: Callable[[int], None] | None = None) -> dict[str, dict[str, float | int]]:
    """Time several ONNX models side by side in interleaved rounds: name -> ``{mean_ms, std_ms, count}``."""
    if backend not in ("ort-cpu", "ort-cuda"):
        raise OFAError(f"measure_onnx needs an onnxruntime backend (ort-cpu or ort-cuda), got {backend!r}")
    check_backend(backend)
    if protocol is None:
        protocol = Protocol(warmup=warmup, rounds=repeats, calls=calls, trim=trim)
    elif not isinstance(protocol, Protocol):
        protocol = Protocol.from_dict(protocol)
    device = "cuda" if backend == "ort-cuda" else "cpu"
    for name, (model, _) in models.items():
        if isinstance(model, str | Path) and not Path(model).is_file():
            raise OFAError(f"{model}: ONNX model not found ({name})")
    runners = {name: OrtRunner(model, shape, threads, device) for name, (model, shape) in models.items()}
    return time_interleaved(runners, protocol, progress)


def subnet_runners(space: SearchSpace, archs: Iterable[Arch], backend: str, batch: int,
                   threads: int) -> dict[str, Runner]:
    """Whole timm subnets (random weights) loaded on ``backend``, keyed by ``Arch.short()`` plus index."""
    from ofa.subnet import build_subnet

    runners = {}
    for i, arch in enumerate(archs):
        model = build_subnet(space, arch).eval()
        shape = (batch, space.in_channels, arch.resolution, arch.resolution)
        runners[f"{i}:{arch.short()}"] = make_runner(backend, model, shape, threads)
    return runners
