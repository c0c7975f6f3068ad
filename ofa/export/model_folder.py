"""A model folder the ecosystem reads: timm's ``config.json``, safetensors weights, a Hub model card, ONNX.

timm's own fields (``architecture``, ``pretrained_cfg``, ``label_names``) say how to feed the model;
the family's timm key (mbv3: ``timm_mobilenetv3``) holds timm's constructor arguments, so timm plus
safetensors rebuild the subnet without this project (the card shows the lines); ``ofa`` holds the
space, arch and fingerprint that `ofa.load_subnet` reads. The card is a ``huggingface_hub.ModelCard``
(Hub front matter: library, tags, dataset, top-1 and latency with its table); rendering needs no network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from torch import nn

from ofa.export.model_card import render_model_card
from ofa.export.result import ExportResult, Preprocessing
from ofa.families.family import Space, TimmFolder
from ofa.families.registry import family_of
from ofa.families.subnet_file import FOLDER_CONFIG, FOLDER_WEIGHTS, subnet_record
from ofa.utils.errors import OFAError
from ofa.utils.io import write_json, write_text
from ofa.utils.weights import save_safetensors

FOLDER_ONNX, FOLDER_INT8, FOLDER_CARD = "model.onnx", "model.int8.onnx", "README.md"
FOLDER_SUMMARY = "model.export.json"
HUB_MISSING = "huggingface_hub is not installed (pip install 'ofa-toolkit[hub]' or pip install huggingface_hub)"


@dataclass(frozen=True)
class FolderContent:
    """Everything a model folder is written from (an export's result, models and preprocessing)."""

    result: ExportResult
    model: nn.Module
    space: Space
    prep: Preprocessing
    proto: onnx.ModelProto
    int8_proto: onnx.ModelProto | None = None


def folder_layout(out: Path) -> tuple[Path, bool]:
    """(model folder, whether ``out`` is that folder): ``DIR`` is the folder, ``X/MODEL.onnx`` puts it at ``X/MODEL``.

    Raises `OFAError` for another suffix (a mistyped file name) or a folder path that is a file.
    """
    if out.suffix == ".onnx":
        folder, is_folder = out.with_suffix(""), False
    elif out.suffix:
        raise OFAError(
            f"{out}: the output must end with .onnx (a model file, with its model folder beside it) "
            "or name a folder without a suffix"
        )
    else:
        folder, is_folder = out, True
    if folder.exists() and not folder.is_dir():
        raise OFAError(f"{folder}: is a file, but the model folder goes there; move it or choose another --out")
    return folder, is_folder


def hf_config(content: FolderContent) -> dict[str, Any]:
    """``config.json``: timm's fields, timm's constructor arguments and ofa's record of the subnet."""
    result, space, prep = content.result, content.space, content.prep
    r, timm = result.arch.resolution, family_of(space).timm_folder
    pretrained: dict[str, Any] = {
        "input_size": [space.in_channels, r, r],
        "fixed_input_size": False,
        "interpolation": "bilinear",
        "crop_pct": 1.0,
        "crop_mode": "center",
        "num_classes": space.num_classes,
        "first_conv": timm.first_conv,
        "classifier": timm.classifier,
    }
    pretrained.update({k: v for k, v in (("mean", prep.mean), ("std", prep.std)) if v is not None})
    meta = {
        "mean": prep.mean,
        "std": prep.std,
        "class_names": prep.class_names,
        "dataset": prep.dataset,
        "supernet_sha256": result.supernet_sha256,
        "bn_recalibration_batches": result.bn_batches,
        "top1": result.top1_fp32,
    }
    return {
        "architecture": timm.architecture,
        "num_classes": space.num_classes,
        "num_features": timm.num_features(content.model),
        "global_pool": "avg",
        "pretrained_cfg": pretrained,
        "label_names": prep.class_names,
        timm.key: family_of(space).timm_args(space, result.arch),
        "ofa": subnet_record(space, result.arch, meta),
    }


def write_model_folder(content: FolderContent, folder: Path, stage: Callable[[Path], Path]) -> list[Path]:
    """Write every file of the folder through ``stage`` (target path → where to write it now); the targets."""
    result = content.result
    targets = {
        name: folder / name for name in (FOLDER_WEIGHTS, FOLDER_CONFIG, FOLDER_CARD, FOLDER_ONNX, FOLDER_SUMMARY)
    }
    save_safetensors(
        stage(targets[FOLDER_WEIGHTS]),
        content.model.state_dict(),
        {"format": "ofa-subnet-weights", "arch": result.arch.to_dict()},
    )
    write_json(stage(targets[FOLDER_CONFIG]), hf_config(content))
    write_text(stage(targets[FOLDER_CARD]), render_hub_card(content))
    onnx.save(content.proto, stage(targets[FOLDER_ONNX]))
    if content.int8_proto is not None:
        targets[FOLDER_INT8] = folder / FOLDER_INT8
        onnx.save(content.int8_proto, stage(targets[FOLDER_INT8]))
    write_json(stage(targets[FOLDER_SUMMARY]), result.to_dict())
    return list(targets.values())


def render_hub_card(content: FolderContent) -> str:
    """README.md: Hub front matter (via ``huggingface_hub.ModelCard``), the export's card and the timm lines."""
    try:
        from huggingface_hub import ModelCard
    except ImportError:
        raise OFAError(HUB_MISSING) from None
    body = render_model_card(content.result, content.space, content.prep)
    timm = _timm_section(family_of(content.space).timm_folder)
    card = ModelCard(f"---\n{card_data(content).to_yaml()}\n---\n\n{body}\n{timm}")
    return str(card)


def card_data(content: FolderContent) -> Any:
    """The front matter: library, tags, dataset, and top-1 and latency (with its table) as eval results."""
    from huggingface_hub import ModelCardData

    result, dataset = content.result, content.prep.dataset
    return ModelCardData(
        library_name="timm",
        pipeline_tag="image-classification",
        model_name=f"ofa-{result.arch.short()}",
        tags=["image-classification", "timm", "once-for-all", "mobilenetv3", "onnx", "safetensors"],
        datasets=[dataset] if dataset else None,
        metrics=["accuracy", "latency_ms"],
        eval_results=_eval_results(result, dataset) if dataset else None,
    )


def _eval_results(result: ExportResult, dataset: str) -> list[Any] | None:
    """Top-1 on the test split and latency per precision (measured, and as the table predicts it)."""
    from huggingface_hub import EvalResult

    def metric(metric_type: str, label: str, value: float, config: str | None = None) -> EvalResult:
        return EvalResult(
            task_type="image-classification",
            dataset_type=dataset,
            dataset_name=dataset,
            dataset_split="test",
            metric_type=metric_type,
            metric_name=label,
            metric_value=round(float(value), 4),
            metric_config=config,
        )

    results = []
    for precision, top1, lat in (
        ("fp32", result.top1_fp32, result.latency_fp32),
        ("INT8", result.top1_int8, result.latency_int8),
    ):
        if top1 is not None:
            results.append(metric("accuracy", f"top-1 ({precision} ONNX)", top1))
        if lat is not None:
            results.append(
                metric(
                    "latency_ms",
                    f"latency ms, {precision}, batch {lat.batch}, {lat.threads} thread(s), {lat.source}",
                    lat.mean_ms,
                    result.table,
                )
            )
    if result.predicted_latency_ms is not None:
        results.append(
            metric("latency_ms", "latency ms predicted by the latency table", result.predicted_latency_ms, result.table)
        )
    return results or None


def _timm_section(timm: TimmFolder) -> str:
    return "\n".join(
        [
            "## Load with timm alone",
            "",
            f"`{timm.architecture}` is not a name in timm's registry: `{FOLDER_CONFIG}` holds timm's {timm.holds} "
            f"under `{timm.key}`. In this folder, with `timm` and `safetensors`:",
            "",
            "```python",
            timm.snippet.format(config=FOLDER_CONFIG, weights=FOLDER_WEIGHTS, key=timm.key).rstrip(),
            "```",
            "",
            "With this project installed: `ofa.load_subnet('<this folder>')`.",
            "",
        ]
    )
