"""INT8 static post-training quantization of an ONNX model with onnxruntime's tools.

One scheme for every INT8 model the project makes: QDQ with unsigned 8-bit activations and per-channel
signed 8-bit weights (U8S8): onnxruntime's x86 integer kernels take that pair on their fast path, where
S8S8 ran a digits subnet several times slower on this project's AVX-512/VNNI CPU. Export calibrates the
activation ranges on training images (never the test split, which stays the held-out measure of what
quantization costs); a latency table's models calibrate on seeded random batches (`quantize_synthetic`),
since a range sets a model's scales, not its speed, and a table's space has no data.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process
from tqdm import tqdm

from ofa.utils.errors import OFAError

SYNTHETIC_BATCHES = 4  # seeded random batches a latency table's model is calibrated on
SYNTHETIC_RECORD = {  # how `quantize_synthetic` quantizes, as a table's meta records it
    "scheme": "QDQ: uint8 activations, per-channel int8 weights (U8S8), MinMax ranges, reduce_range",
    "calibration": f"synthetic: {SYNTHETIC_BATCHES} seeded standard-normal batches of each model's input shape "
    "(ranges set the scales, not the speed)",
}


class _BatchReader(CalibrationDataReader):
    """Feeds calibration batches (already shaped for the model's input) to the calibrator."""

    def __init__(self, input_name: str, batches: Sequence[np.ndarray], bar: tqdm) -> None:
        self.input_name = input_name
        self.batches = batches
        self.position = 0
        self.bar = bar

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.position >= len(self.batches):
            return None
        batch = self.batches[self.position]
        self.position += 1
        self.bar.update()
        return {self.input_name: np.ascontiguousarray(batch, dtype=np.float32)}

    def rewind(self) -> None:
        self.position = 0


def quantize_int8(
    model: onnx.ModelProto, calibration: Sequence[np.ndarray], *, per_channel: bool = True, progress: bool = False
) -> onnx.ModelProto:
    """Return the INT8 (QDQ) version of ``model`` calibrated on ``calibration`` batches.

    Each batch must match the model's input shape (a static batch dimension included). The
    fp32 model's metadata_props are carried over; the caller adds what describes the quantization.
    ``progress`` shows a bar over the calibration batches.
    """
    if not calibration:
        raise OFAError("INT8 quantization needs calibration images (none were given)")
    input_name = model.graph.input[0].name
    # The quantizer logs every node it leaves in float at INFO/WARNING; keep the CLI output readable.
    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="ofa-int8-") as tmp,
            tqdm(
                total=len(calibration), desc="INT8 calibration", unit="batch", disable=not progress, leave=False
            ) as bar,
        ):
            fp32, prepared, int8 = (Path(tmp) / name for name in ("fp32.onnx", "prepared.onnx", "int8.onnx"))
            onnx.save(model, fp32)
            quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=True)
            quantize_static(
                str(prepared),
                str(int8),
                _BatchReader(input_name, calibration, bar),
                quant_format=QuantFormat.QDQ,
                per_channel=per_channel,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax,
                # 7-bit weights: U8S8 on x86 CPUs without VNNI (AVX2 only) multiplies in int16 with
                # saturation, which wrecked the model (10% top-1 on digits) on such a CPU.
                reduce_range=True,
            )
            quantized = onnx.load(int8)
    finally:
        logging.getLogger().setLevel(quiet)
    del quantized.metadata_props[:]
    quantized.metadata_props.extend(model.metadata_props)
    return quantized


def synthetic_batches(shape: Sequence[int], n: int = SYNTHETIC_BATCHES, seed: int = 0) -> list[np.ndarray]:
    """``n`` seeded standard-normal batches of ``shape``: calibration data for a model timed without any data."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(shape)).astype(np.float32) for _ in range(n)]


def quantize_synthetic(model: bytes | Path | onnx.ModelProto, shape: Sequence[int]) -> onnx.ModelProto:
    """``model`` in INT8 with `quantize_int8`'s scheme, calibrated on `synthetic_batches` of its input shape."""
    if isinstance(model, bytes):
        model = onnx.load_from_string(model)
    elif not isinstance(model, onnx.ModelProto):
        model = onnx.load(model)
    return quantize_int8(model, synthetic_batches(shape))
