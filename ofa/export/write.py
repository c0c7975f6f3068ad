"""The last two steps of an export: metadata into the ONNX models, then every file written at once.

Nothing is written unless every check passed: the files are built in a temporary folder beside the output
and renamed into place at the end, so a failed export never clobbers a good one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import onnx

from ofa.export.edge_formats import Converted, format_targets, stage_format
from ofa.export.model_card import render_model_card
from ofa.export.model_folder import FolderContent, write_model_folder
from ofa.export.result import Preprocessing
from ofa.export.steps import Measured, StaticSubnet
from ofa.families.subnet_file import save_subnet
from ofa.runtime.convert import build_metadata, set_metadata
from ofa.utils.io import write_json, write_text

INT8_PRECISION = "int8 (QDQ, static, uint8 activations, per-channel int8 weights)"


def with_metadata(
    proto: onnx.ModelProto, subject: StaticSubnet, prep: Preprocessing, measured: Measured, opset: int
) -> tuple[onnx.ModelProto, onnx.ModelProto | None]:
    """The fp32 and INT8 models with everything needed to feed them and trace them back in ``metadata_props``."""
    fp32, int8, timing, predicted = measured.fp32, measured.int8, measured.timing, measured.prediction
    values = {
        "supernet_sha256": subject.supernet_sha256,
        "predicted_top1": predicted.top1,
        "predicted_latency_ms": predicted.latency_ms,
        "latency_table": predicted.table,
        "latency_table_dtype": predicted.dtype,
        "macs": measured.macs,
        "params": measured.params,
        "bn_recalibration_batches": subject.bn_batches,
        "top1_fp32": fp32.top1 if fp32 is not None else None,
        "latency_ms_fp32": timing.fp32.mean_ms if timing is not None else None,
        "parity_max_abs_diff": measured.parity.max_abs_diff,
        "opset": opset,
        "preprocess": prep.resize,
        "finetuned_sha256": subject.finetuned_sha256,
    }

    def stamped(model: onnx.ModelProto, extra: dict[str, Any]) -> onnx.ModelProto:
        props = build_metadata(
            subject.space,
            subject.arch,
            mean=prep.mean,
            std=prep.std,
            class_names=prep.class_names,
            values={**values, **extra},
        )
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return set_metadata(copy, props)

    if int8 is None:
        return stamped(proto, {"precision": "fp32"}), None
    int8_values = {
        "precision": INT8_PRECISION,
        "top1_int8": int8.accuracy.top1 if int8.accuracy is not None else None,
        "latency_ms_int8": timing.int8.mean_ms if timing is not None and timing.int8 is not None else None,
        "int8_calibration_images": int8.calibration_images,
    }
    return stamped(proto, {"precision": "fp32"}), stamped(int8.proto, int8_values)


def write_export(content: FolderContent, converted: Sequence[Converted] = ()) -> None:
    """Write every file into a temp folder beside the output, then rename them all into place.

    The model folder always; with ``--out MODEL.onnx`` also today's files beside it; the other formats in both.
    """
    out, folder = content.result.onnx_path, content.result.folder
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.stem}.", dir=out.parent) as tmp:
        staged: list[tuple[Path, Path]] = []

        def stage(target: Path) -> Path:
            staged.append((Path(tmp) / f"{len(staged)}-{target.name}", target))
            return staged[-1][0]

        if folder != out.parent:
            _stage_beside(content, stage)
        write_model_folder(content, folder, stage)
        for c in converted:
            stage_format(c, format_targets(c.format, folder, out), stage)
        for src, dst in staged:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)


def _stage_beside(content: FolderContent, stage: Callable[[Path], Path]) -> None:
    """``--out MODEL.onnx``'s files beside the model folder: the ONNX models, the subnet, the card, the summary."""
    result = content.result
    onnx.save(content.proto, stage(result.onnx_path))
    if content.int8_proto is not None and result.int8_path is not None:
        onnx.save(content.int8_proto, stage(result.int8_path))
    save_subnet(content.model, content.space, result.arch, stage(result.subnet_path), meta=_subnet_meta(content))
    write_text(stage(result.card_path), render_model_card(result, content.space, content.prep))
    write_json(stage(result.summary_path), result.to_dict())


def _subnet_meta(content: FolderContent) -> dict[str, Any]:
    """What the ``.pt`` subnet file records besides its arch: how to feed it and where it came from."""
    result, prep = content.result, content.prep
    return {
        "mean": prep.mean,
        "std": prep.std,
        "class_names": prep.class_names,
        "supernet_sha256": result.supernet_sha256,
        "bn_recalibration_batches": result.bn_batches,
        "top1": result.top1_fp32,
        "space_fingerprint": content.space.fingerprint(),
        **({"preprocess": prep.resize} if prep.resize else {}),
        **({"finetuned_sha256": result.finetuned_sha256} if result.finetuned_sha256 else {}),
    }
