"""A subnet's top-1 after INT8 post-training quantization, as ``ofa export --int8`` measures it: the measurement
``ofa predictor collect --dtype int8`` is handed (`search.predictor.collect.Int8Top1`), which lives here because
quantizing runs on onnxruntime, to the right of the search layer."""

from __future__ import annotations

from torch import nn

from ofa.export.steps import int8_model
from ofa.export.verify import onnx_accuracy
from ofa.runtime.convert import DEFAULT_OPSET, to_onnx
from ofa.runtime.runtimes import OrtModel
from search.predictor.collect import Int8Inputs


def int8_top1(model: nn.Module, shape: tuple[int, int, int], inputs: Int8Inputs) -> float:
    """Top-1 (percent) over ``inputs.evals`` of ``model`` (a static subnet in eval mode) converted to ONNX and
    quantized with export's scheme on ``inputs.images`` training images drawn as export draws them."""
    channels, resolution, _ = shape
    proto = to_onnx(model.eval(), channels, resolution, DEFAULT_OPSET, None)
    quantized, _ = int8_model(proto, inputs.calib, inputs.batch_size, inputs.images, resolution, inputs.seed)
    runner = OrtModel(quantized)
    correct = total = 0.0
    for loader in inputs.evals:
        top1, preds = onnx_accuracy(runner, loader, resolution)
        correct, total = correct + top1 * len(preds), total + len(preds)
    return correct / max(total, 1)
