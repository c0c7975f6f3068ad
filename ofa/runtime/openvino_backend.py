"""OpenVINO on CPU: reads the project's ONNX models (layers, subnets, exports) and runs them on its CPU plugin.

OpenVINO is an optional extra: it is imported inside the functions, and a missing install is one line
naming the extra. Models are compiled for latency with ``threads`` inference threads, one stream and
f32 inference precision: on CPUs with bf16 units the plugin would otherwise drop to bf16 and break parity.
INT8 models are quantized by NNCF, the way OpenVINO users quantize (`quantize`); the layers the CPU plugin still
runs in f32 are read back from the compiled model (`float_ops`).
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ofa.utils.errors import OFAError

MISSING = "OpenVINO is not installed (pip install 'ofa-toolkit[openvino]' or pip install openvino)"
MISSING_NNCF = "OpenVINO INT8 needs NNCF (pip install 'ofa-toolkit[openvino]' or pip install nncf)"
INT8_RECORD = {  # how `quantize` quantizes, as a table's meta records it
    "scheme": "NNCF post-training quantization, its defaults (performance preset: symmetric 8-bit weights per "
    "output channel and 8-bit activations, fast bias correction)",
}
NOT_COMPUTE = {"Input", "Output", "Const", "Reorder", "Reshape"}  # layer types that move data, not compute it
RT_INFO_KEY = "ofa"  # rt_info section that holds the export's metadata, as ONNX files hold ``ofa.*`` props


def _openvino() -> Any:
    try:
        import openvino
    except ImportError:
        raise OFAError(MISSING) from None
    return openvino


@functools.cache
def _core() -> Any:
    """One ``openvino.Core`` per process: creating one loads the plugins, seconds per model otherwise."""
    return _openvino().Core()


def _nncf() -> Any:
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # NNCF imports torch's: no GPU note
    try:
        import nncf
    except ImportError:
        raise OFAError(MISSING_NNCF) from None
    nncf.set_log_level(logging.ERROR)
    return nncf


def version() -> str:
    return str(_openvino().__version__).split("-")[0]


def from_onnx(onnx_model: bytes | Path, metadata: Mapping[str, str] | None = None) -> Any:
    """The ``openvino.Model`` of an ONNX model (bytes or file), with ``metadata`` in its rt_info."""
    source = onnx_model if isinstance(onnx_model, bytes) else str(onnx_model)
    try:  # the ONNX frontend of the runtime itself: `openvino.convert_model` takes a second and phones home
        model = _core().read_model(source)
    except Exception as exc:  # OpenVINO raises its own exception types for models it cannot read
        raise OFAError(f"OpenVINO cannot read the ONNX model: {str(exc).splitlines()[0]}") from None
    for key, value in (metadata or {}).items():
        model.set_rt_info(str(value), [RT_INFO_KEY, key])
    return model


def save(model: Any, path: Path) -> list[Path]:
    """Write ``path`` (.xml) and its weights (.bin beside it), uncompressed f32; the files written."""
    _openvino().save_model(model, str(path), compress_to_fp16=False)
    return [path, path.with_suffix(".bin")]


def read_metadata(path: str | Path) -> dict[str, str]:
    """The ``ofa`` rt_info of a saved model (.xml)."""
    model = _core().read_model(str(path))
    if not model.has_rt_info([RT_INFO_KEY]):
        return {}
    return {key: value.astype(str) for key, value in model.get_rt_info()[RT_INFO_KEY].items()}


def compile_infer(model: Any, threads: int) -> Callable[[np.ndarray], np.ndarray]:
    """``model`` (an ``openvino.Model`` or a .xml file) compiled on CPU: a function from input to first output."""
    config = {
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32",
    }
    try:
        compiled = _core().compile_model(model if not isinstance(model, Path) else str(model), "CPU", config)
    except Exception as exc:  # a model the CPU plugin cannot compile
        raise OFAError(f"OpenVINO cannot compile the model: {str(exc).splitlines()[0]}") from None
    request = compiled.create_infer_request()

    def infer(x: np.ndarray) -> np.ndarray:
        return request.infer([x])[0]

    return infer


def quantize(model: Any, batches: Sequence[np.ndarray]) -> Any:
    """``model`` (an ``openvino.Model``) in INT8 by NNCF's post-training quantization, calibrated on ``batches``
    (each of the model's input shape); NNCF's progress bars are kept off the command's output."""
    nncf = _nncf()
    if not batches:
        raise OFAError("INT8 quantization needs calibration images (none were given)")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            return nncf.quantize(model, nncf.Dataset(list(batches)), subset_size=len(batches))
        except Exception as exc:  # NNCF raises its own types for graphs it cannot quantize
            raise OFAError(f"NNCF cannot quantize the model: {str(exc).splitlines()[0]}") from None


def float_ops(model: Any, threads: int) -> tuple[str, ...]:
    """The layer types the CPU plugin computes in f32 in the compiled ``model``: an INT8 model's float fallbacks."""
    compiled = _core().compile_model(
        model, "CPU", {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
    )
    ops = set()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer = info["layerType"].astype(str) if "layerType" in info else op.get_type_name()
        if layer not in NOT_COMPUTE and "runtimePrecision" in info and info["runtimePrecision"].astype(str) == "f32":
            ops.add(layer)
    return tuple(sorted(ops))
