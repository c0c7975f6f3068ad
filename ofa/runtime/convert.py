"""PyTorch → ONNX with the TorchScript exporter, the full ``onnx.checker`` check, and ``ofa.*`` metadata.

The TorchScript exporter writes exactly the requested opset in ~0.1 s; the dynamo exporter takes
seconds, cannot write opsets below 18 and fails to down-convert this graph (Squeeze axes). Latency
tables time single layers exported with the same settings, so a layer is timed as it runs in an
exported subnet.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import nn

from ofa.families.family import Arch, Space
from ofa.families.registry import arch_from_dict, space_from_dict
from ofa.utils.errors import OFAError

INPUT_NAME, OUTPUT_NAME = "input", "logits"
DEFAULT_OPSET = 17  # exported subnets by default, and every latency table's layers
# 13: per-channel INT8 (DequantizeLinear's axis) needs it; 20: the newest the TorchScript exporter writes.
MIN_OPSET, MAX_OPSET = 13, 20
META_PREFIX = "ofa."


def check_opset(opset: int) -> int:
    """``opset`` if the exporter and INT8 both support it, else `OFAError`."""
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise OFAError(f"opset {opset!r} is not supported: choose {MIN_OPSET}..{MAX_OPSET} (default {DEFAULT_OPSET})")
    return opset


def _trace(
    module: nn.Module,
    dummy: torch.Tensor,
    target: Any,
    opset: int,
    output_name: str,
    dynamic_axes: dict[str, dict[int, str]] | None = None,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation on every call
        torch.onnx.export(
            module.eval(),
            (dummy,),
            target,
            dynamo=False,
            opset_version=opset,
            input_names=[INPUT_NAME],
            output_names=[output_name],
            dynamic_axes=dynamic_axes,
            do_constant_folding=True,
        )


def export_onnx(
    module: nn.Module, input_shape: Sequence[int], path: str | Path | None = None, opset: int = DEFAULT_OPSET
) -> bytes | Path:
    """Export one layer or model at a fixed input shape; bytes when no path is given."""
    target: Any = io.BytesIO() if path is None else str(path)
    with torch.no_grad():
        _trace(module, torch.zeros(tuple(input_shape)), target, opset, "output")
    return target.getvalue() if path is None else Path(path)


def to_onnx(model: nn.Module, in_channels: int, resolution: int, opset: int, batch: int | None) -> onnx.ModelProto:
    """A subnet as an ONNX model with input ``input`` and output ``logits``; ``batch=None``: dynamic batch."""
    dummy = torch.zeros(batch or 2, in_channels, resolution, resolution)
    axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if batch is None else None
    buffer = io.BytesIO()
    _trace(model, dummy, buffer, opset, OUTPUT_NAME, axes)
    return onnx.load_from_string(buffer.getvalue())


def check_onnx(model: onnx.ModelProto, what: str = "exported model") -> None:
    """``onnx.checker`` with the full check (shape inference included); a failure is one `OFAError` line."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise OFAError(f"{what} fails onnx.checker: {str(exc).strip().splitlines()[0]}") from None


def build_metadata(
    space: Space, arch: Arch, *, mean: Any, std: Any, class_names: Any, values: Mapping[str, Any]
) -> dict[str, str]:
    """``metadata_props`` of an exported model: everything needed to feed it and to trace it back."""
    meta = {
        "arch": arch.to_dict(),
        "resolution": arch.resolution,
        "in_channels": space.in_channels,
        "input_layout": "NCHW float32, (pixel - mean) / std per channel",
        "mean": mean,
        "std": std,
        "class_names": class_names,
        "space": space.to_dict(),
        "space_fingerprint": space.fingerprint(),
        **values,
    }
    return {META_PREFIX + k: json.dumps(v) for k, v in meta.items() if v is not None}


def set_metadata(model: onnx.ModelProto, props: Mapping[str, str]) -> onnx.ModelProto:
    """Replace ``props`` in the model's ``metadata_props`` (others kept) and mark the producer."""
    kept = [p for p in model.metadata_props if p.key not in props]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in props.items():
        model.metadata_props.add(key=key, value=value)
    model.producer_name = "ofa"
    model.doc_string = "Once-for-all subnet exported by `ofa export`; see metadata_props ofa.*"
    return model


def read_metadata(model: onnx.ModelProto | str | Path) -> dict[str, Any]:
    """The ``ofa.*`` metadata of an exported model, decoded (``arch`` is an arch of the stored space's family).

    Raises `OFAError` for a missing or unreadable file.
    """
    if not isinstance(model, onnx.ModelProto):
        path = Path(model)
        if not path.is_file():
            raise OFAError(f"{path}: ONNX model not found")
        try:
            model = onnx.load(path, load_external_data=False)
        except Exception as exc:  # protobuf raises DecodeError and friends for a corrupt file
            raise OFAError(f"{path}: not a readable ONNX model: {exc}") from None
    out: dict[str, Any] = {}
    for prop in model.metadata_props:
        if prop.key.startswith(META_PREFIX):
            out[prop.key[len(META_PREFIX) :]] = json.loads(prop.value)
    if "arch" in out:
        space = space_from_dict(out.get("space"), "metadata_props ofa.space")
        out["arch"] = arch_from_dict(space, out["arch"], "metadata_props ofa.arch")
    return out
