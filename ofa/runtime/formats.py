"""Model formats beyond ONNX on onnxruntime: one place that knows each format's backend, files and runtime.

``onnx`` runs on onnxruntime (`ofa.runtime.runtimes`), ``openvino`` on OpenVINO's CPU plugin (read from
the same ONNX model), ``executorch`` on ExecuTorch with XNNPACK (a ``.pte`` from ``torch.export``). Export,
the latency tables' runners and ``ofa lut pack`` all convert, write and load models through here, so a
layer is timed in the very format an exported subnet ships in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ofa.runtime import executorch_backend, openvino_backend
from ofa.runtime.convert import export_onnx
from ofa.runtime.quantize import SYNTHETIC_RECORD, quantize_synthetic, synthetic_batches
from ofa.utils.errors import OFAError
from search.latency import DTYPES

FORMAT_BACKEND = {"onnx": "ort-cpu", "openvino": "openvino-cpu", "executorch": "executorch-xnnpack"}
BACKEND_FORMAT = {backend: fmt for fmt, backend in FORMAT_BACKEND.items()}
SUFFIX = {"onnx": ".onnx", "openvino": ".xml", "executorch": ".pte"}
RUNTIME = {"openvino": "openvino", "executorch": "executorch"}  # runtime name in a table's meta
WORKER_THREADS = {"openvino"}  # runtimes that infer on their own threads: timed against the process's CPU time
EDGE_FORMAT = {backend: fmt for backend, fmt in BACKEND_FORMAT.items() if fmt in RUNTIME}  # backends run here
INT8_SCHEMES = {  # each format with an INT8 path, quantized by its runtime's own tool: how, for a table's meta
    "onnx": SYNTHETIC_RECORD["scheme"],
    "openvino": openvino_backend.INT8_RECORD["scheme"],
    "executorch": executorch_backend.INT8_RECORD["scheme"],
}
INT8_FORMATS = tuple(INT8_SCHEMES)


def check_format(name: str) -> str:
    """A format name, or one line naming the choices; a backend name is taken for its format."""
    fmt = BACKEND_FORMAT.get(name, name)
    if fmt not in FORMAT_BACKEND:
        raise OFAError(
            f"unknown format {name!r} (choose from {', '.join(FORMAT_BACKEND)}, or a backend: "
            f"{', '.join(BACKEND_FORMAT)})"
        )
    return fmt


def require(fmt: str) -> None:
    """One line naming the extra to install when the runtime of ``fmt`` is missing."""
    if fmt in RUNTIME:
        runtime_version(fmt)


def runtime_version(fmt: str) -> str:
    return openvino_backend.version() if fmt == "openvino" else executorch_backend.version()


def convert(
    fmt: str,
    module: nn.Module | None,
    shape: Sequence[int],
    onnx_model: bytes | Path | None = None,
    metadata: Mapping[str, str] | None = None,
    dtype: str = "float32",
) -> Any:
    """``module`` (or, for ONNX and OpenVINO, ``onnx_model``) in format ``fmt``: ONNX or .pte bytes, an
    ``openvino.Model``. ``dtype="int8"`` (`INT8_FORMATS`): quantized on synthetic data (`int8_record`)."""
    if dtype not in DTYPES or (dtype == "int8" and fmt not in INT8_FORMATS):
        raise OFAError(f"format {fmt!r} has no {dtype} path here (float32, or int8 for {' and '.join(INT8_FORMATS)})")
    if fmt == "executorch":
        if module is None:
            raise OFAError("an ExecuTorch program is made from a torch module, and none was given")
        return executorch_backend.to_pte(module, shape, metadata, synthetic_batches(shape) if dtype == "int8" else None)
    if onnx_model is None:
        if module is None:
            raise OFAError(f"a {fmt} model is made from a torch module or an ONNX model, and neither was given")
        onnx_model = export_onnx(module, shape)
    if fmt == "openvino":
        model = openvino_backend.from_onnx(onnx_model, metadata)
        return openvino_backend.quantize(model, synthetic_batches(shape)) if dtype == "int8" else model
    if dtype == "int8":
        return quantize_synthetic(onnx_model, shape).SerializeToString()
    return onnx_model if isinstance(onnx_model, bytes) else Path(onnx_model).read_bytes()


def int8_record(name: str) -> dict[str, str]:
    """How a table's (or a pack's) models in format (or on backend) ``name`` are quantized, for its ``meta.int8``."""
    scheme = INT8_SCHEMES[BACKEND_FORMAT.get(name, name)]
    return {"scheme": scheme, "calibration": SYNTHETIC_RECORD["calibration"]}


def int8_float_ops(fmt: str, model: Any, threads: int) -> tuple[str, ...]:
    """The op types an INT8 model converted by `convert` still computes in float on its runtime."""
    if fmt == "openvino":
        return openvino_backend.float_ops(model, threads)
    return executorch_backend.program_float_ops(model)


def write(fmt: str, model: Any, path: Path) -> list[Path]:
    """Write ``model`` to ``path`` (with the format's suffix); every file written (OpenVINO: .xml and .bin)."""
    if fmt == "openvino":
        return openvino_backend.save(model, path)
    path.write_bytes(model)
    return [path]


def load_infer(fmt: str, model: Any, threads: int) -> Callable[[np.ndarray], np.ndarray]:
    """A converted model (or its file) loaded on its runtime: input array → first output array."""
    if fmt == "openvino":
        return openvino_backend.compile_infer(model, threads)
    if fmt == "executorch":
        return executorch_backend.load_infer(model, threads)
    raise OFAError(f"format {fmt!r} runs on onnxruntime (ofa.runtime.runtimes), not here")


def read_metadata(fmt: str, path: Path) -> dict[str, str]:
    """The metadata an exported OpenVINO or ExecuTorch file carries."""
    return openvino_backend.read_metadata(path) if fmt == "openvino" else executorch_backend.read_metadata(path)


class FormatModel:
    """A fixed-batch model on its runtime that runs any number of inputs (the tail padded to the batch)."""

    def __init__(self, infer: Callable[[np.ndarray], np.ndarray], batch: int) -> None:
        self.infer, self.batch = infer, batch

    def __call__(self, x: np.ndarray, chunk: int = 256) -> np.ndarray:
        outputs = []
        for start in range(0, len(x), self.batch):
            part = np.ascontiguousarray(x[start : start + self.batch], dtype=np.float32)
            n = len(part)
            if n < self.batch:
                part = np.concatenate([part, np.repeat(part[-1:], self.batch - n, axis=0)])
            outputs.append(np.array(self.infer(part))[:n])
        return np.concatenate(outputs)
