"""Inference backends: onnxruntime and torch, on CPU or CUDA, behind one small interface.

A `Runner` holds one loaded model with a fixed input and times each call (see `ofa.lut.timing`); an
`OrtModel` runs any number of real inputs through an exported model (parity, accuracy). Both open
their onnxruntime session through `open_session`, so an unreadable model is one clear error.
"""

from __future__ import annotations

import json
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from ofa.runtime import formats
from ofa.utils.errors import OFAError
from ofa.utils.machine import cpu_name
from search.latency import check_known_dtype

BACKENDS = ("ort-cpu", "torch-cpu", "ort-cuda", "torch-cuda", "openvino-cpu", "executorch-xnnpack")
INT8_BACKENDS = tuple(formats.FORMAT_BACKEND[f] for f in formats.INT8_FORMATS)  # each INT8 format's backend


def check_backend(backend: str) -> None:
    """Refuse an unknown backend, or a CUDA one on a machine without a GPU, with one clear line."""
    if backend not in BACKENDS:
        raise OFAError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if backend in formats.EDGE_FORMAT:
        formats.require(formats.EDGE_FORMAT[backend])
    if backend.endswith("cuda"):
        if not torch.cuda.is_available():
            raise OFAError(f"backend {backend!r} needs a CUDA GPU, and none is visible here")
        if backend == "ort-cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
            raise OFAError("backend 'ort-cuda' needs onnxruntime-gpu (CUDAExecutionProvider is not available)")


def check_dtype(backend: str, dtype: str, what: str = "dtype") -> None:
    """Refuse an unknown dtype, or INT8 on a backend without an INT8 path, with one line naming ``what``."""
    check_known_dtype(dtype, what)
    if dtype == "int8" and backend not in INT8_BACKENDS:
        raise OFAError(f"{what}: backend {backend!r} has no INT8 path here (INT8 runs on {', '.join(INT8_BACKENDS)})")


def backend_device(backend: str) -> str:
    return "cuda" if backend.endswith("cuda") else "cpu"


def runtime_info(backend: str) -> dict[str, str]:
    """Runtime name and version, and the processor, for a table's meta."""
    if backend.startswith("ort"):
        runtime, version = "onnxruntime", ort.__version__
    elif backend in formats.EDGE_FORMAT:
        fmt = formats.EDGE_FORMAT[backend]
        runtime, version = formats.RUNTIME[fmt], formats.runtime_version(fmt)
    else:
        runtime, version = "torch", str(torch.__version__)
    info = {"runtime": runtime, "runtime_version": version, "cpu": cpu_name()}
    if backend.endswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def open_session(model: str | Path | bytes, options: ort.SessionOptions, device: str = "cpu") -> ort.InferenceSession:
    """An onnxruntime session on ``device``; a model onnxruntime cannot load is an `OFAError`."""
    providers = ["CUDAExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    source = str(model) if isinstance(model, str | Path) else model
    try:
        return ort.InferenceSession(source, options, providers=providers)
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable models
        where = str(model) if isinstance(model, str | Path) else "model"
        raise OFAError(f"{where}: onnxruntime cannot load it: {str(exc).splitlines()[0]}") from None


# --------------------------------------------------------------------------------- timing runners
class Runner(ABC):
    """One loaded model with a fixed input; ``times(n)`` times each of ``n`` back-to-back calls."""

    device: str = "cpu"
    threads: int = 1
    float_ops: tuple[str, ...] = ()  # INT8 models: the op types the runtime computes in float (`float_ops`)

    @abstractmethod
    def times(self, calls: int) -> tuple[np.ndarray, np.ndarray]:
        """(wall ms, this thread's CPU ms) of each of ``calls`` back-to-back calls.

        Where the two differ by more than the call's own work, the OS ran something else meanwhile.
        """


def _timed_calls(
    call: Callable[[], object], calls: int, cpu_clock: Callable[[], int] = time.thread_time_ns
) -> tuple[np.ndarray, np.ndarray]:
    """Wall and CPU nanoseconds of each call (this thread's, or ``cpu_clock``'s); the wall reading sits tight
    around the call."""
    wall, cpu = np.empty(calls), np.empty(calls)
    for i in range(calls):
        c0 = cpu_clock()
        t0 = time.perf_counter_ns()
        call()
        t1 = time.perf_counter_ns()
        cpu[i] = cpu_clock() - c0
        wall[i] = t1 - t0
    return wall / 1e6, cpu / 1e6


class OrtRunner(Runner):
    """An onnxruntime session called as a user calls it: ``session.run`` on a NumPy input.

    That includes what every call pays in a user's loop (binding the input, allocating the outputs),
    so tables predict the latency a user measures, not a lower bound of it.
    """

    def __init__(
        self, model: str | Path | bytes, input_shape: Sequence[int], threads: int = 1, device: str = "cpu"
    ) -> None:
        self.session = open_session(model, session_options(threads), device)
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            raise OFAError(f"expected a model with one input, got {len(inputs)}")
        x = np.random.default_rng(0).standard_normal(tuple(input_shape)).astype(np.float32)
        self.device, self.threads = device, threads
        self.feed = {inputs[0].name: x}
        try:
            self.session.run(None, self.feed)
        except Exception as exc:  # e.g. an input shape the model does not take
            raise OFAError(
                f"model does not run on input of shape {list(input_shape)}: {str(exc).splitlines()[0]}"
            ) from None

    def times(self, calls: int) -> tuple[np.ndarray, np.ndarray]:
        run, feed = self.session.run, self.feed
        return _timed_calls(lambda: run(None, feed), calls)


class TorchRunner(Runner):
    """A torch module in eval/inference mode; CUDA timings use CUDA events."""

    def __init__(self, module: nn.Module, input_shape: Sequence[int], threads: int = 1, device: str = "cpu") -> None:
        if device == "cpu":
            torch.set_num_threads(threads)
        self.device, self.threads = device, threads
        self.module = module.eval().to(device)
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(tuple(input_shape), generator=gen).to(device)
        with torch.inference_mode():
            self.module(self.x)

    def times(self, calls: int) -> tuple[np.ndarray, np.ndarray]:
        """CUDA: event times, reported as both clocks (the host thread's CPU time says nothing there)."""
        with torch.inference_mode():
            if self.device == "cuda":
                events = [
                    (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)
                ]
                for start, end in events:
                    start.record()
                    self.module(self.x)
                    end.record()
                torch.cuda.synchronize()
                ms = np.array([start.elapsed_time(end) for start, end in events])
                return ms, ms
            return _timed_calls(lambda: self.module(self.x), calls)


class CallRunner(Runner):
    """A model another runtime loaded (`ofa.runtime.formats`: OpenVINO, ExecuTorch), called on one fixed input.

    A runtime that computes on its own worker threads (OpenVINO, even with one) is judged on the process's
    CPU time: the calling thread only waits, so its own CPU time would make every call look preempted.
    """

    def __init__(
        self,
        infer: Callable[[np.ndarray], np.ndarray],
        input_shape: Sequence[int],
        threads: int,
        worker_threads: bool = False,
    ) -> None:
        x = np.random.default_rng(0).standard_normal(tuple(input_shape)).astype(np.float32)
        self.threads = threads
        self.call = lambda: infer(x)
        self.cpu_clock = time.process_time_ns if worker_threads else time.thread_time_ns
        self.call()

    def times(self, calls: int) -> tuple[np.ndarray, np.ndarray]:
        return _timed_calls(self.call, calls, self.cpu_clock)


def session_options(threads: int) -> ort.SessionOptions:
    """The session settings every timing uses: ``threads`` intra-op threads, sequential, all optimizations."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return opts


def float_ops(model: bytes, shape: Sequence[int], threads: int) -> tuple[str, ...]:
    """The op types onnxruntime computes in float in ``model``, as a timing session optimizes it: an INT8 model's
    float fallbacks (what the quantizer left out and what has no integer kernel), read from a profiled call.

    A kernel with a float output of rank >= 1 counts; the Q/DQ conversions between the two do not.
    """
    opts = session_options(threads)
    opts.enable_profiling = True
    with tempfile.TemporaryDirectory(prefix="ofa-profile-") as tmp:
        opts.profile_file_prefix = str(Path(tmp) / "profile")
        session = open_session(model, opts)
        session.run(None, {session.get_inputs()[0].name: np.zeros(tuple(shape), np.float32)})
        events = json.loads(Path(session.end_profiling()).read_text())
    ops = set()
    for event in events:
        args = event.get("args") or {}
        op = args.get("op_name")
        outputs = args.get("output_type_shape") or []
        if op and op not in ("QuantizeLinear", "DequantizeLinear") and any(len(o.get("float", [])) for o in outputs):
            ops.add(op)
    return tuple(sorted(ops))


def make_runner(
    backend: str,
    module: nn.Module | None,
    shape: Sequence[int],
    threads: int,
    onnx_model: bytes | Path | None = None,
    dtype: str = "float32",
) -> Runner:
    """A runner for ``module`` on ``backend``; ONNX backends (and OpenVINO, which reads ONNX) export it unless
    ``onnx_model`` is given; ExecuTorch converts the module. ``dtype="int8"`` (`INT8_BACKENDS`): the ONNX model
    (OpenVINO: its ``openvino.Model``; ExecuTorch: the module) quantized on synthetic data, its float fallbacks in
    ``float_ops``."""
    check_dtype(backend, dtype)
    device = backend_device(backend)
    if backend in formats.EDGE_FORMAT:
        fmt = formats.EDGE_FORMAT[backend]
        model = formats.convert(fmt, module, shape, onnx_model, dtype=dtype)
        call = CallRunner(formats.load_infer(fmt, model, threads), shape, threads, fmt in formats.WORKER_THREADS)
        if dtype == "int8":
            call.float_ops = formats.int8_float_ops(fmt, model, threads)
        return call
    if backend.startswith("ort"):
        model = formats.convert("onnx", module, shape, onnx_model, dtype=dtype)
        runner = OrtRunner(model, shape, threads, device)
        if dtype == "int8":
            runner.float_ops = float_ops(model, shape, threads)
        return runner
    if module is None:
        raise OFAError(f"backend {backend!r} times a torch module, and none was given")
    return TorchRunner(module, shape, threads, device)


# --------------------------------------------------------------------------------- inference
class OrtModel:
    """An onnxruntime CPU session that runs any number of inputs, in chunks its batch dim accepts."""

    def __init__(self, model: onnx.ModelProto | str | Path) -> None:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: optimizer notes would clutter the command's output
        # Idle worker threads sleep instead of spinning: on a shared CPU spinning threads starve the others.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
        self.session = open_session(source, options)
        spec = self.session.get_inputs()[0]
        self.input_name = spec.name
        self.batch = spec.shape[0] if isinstance(spec.shape[0], int) else None

    def __call__(self, x: np.ndarray, chunk: int = 256) -> np.ndarray:
        step = self.batch or chunk
        outputs = []
        for start in range(0, len(x), step):
            part = np.ascontiguousarray(x[start : start + step], dtype=np.float32)
            n = len(part)
            if self.batch and n < self.batch:  # a static batch: pad the tail, drop the padding's outputs
                part = np.concatenate([part, np.repeat(part[-1:], self.batch - n, axis=0)])
            outputs.append(self.session.run(None, {self.input_name: part})[0][:n])
        return np.concatenate(outputs)
