"""Export one subnet of a supernet to ONNX with no retraining, verified end to end.

extract the static timm subnet → recalibrate its BN statistics on training images → ONNX
(`ofa.runtime.convert`) → ``onnx.checker`` full check → onnxruntime vs PyTorch parity on real and
random inputs (`ofa.export.verify`) → test-split accuracy → optional INT8 (`ofa.export.quantize`)
→ measured latency (`ofa.lut.timing`) → metadata in the files → a model folder for timm and the Hub
(`ofa.export.model_folder`: safetensors, timm's config.json, a Hub card, the ONNX models, the JSON summary);
with ``--out MODEL.onnx`` also the static PyTorch subnet, a model card and the summary next to the ``.onnx``.
A subnet already fine-tuned on its own (`ofa finetune`) takes the same path from the conversion on: its BN
statistics are its own and are not recalibrated.

Nothing is written unless every check passes: the files are built in a temporary folder beside
the output and renamed into place at the end, so a failed export never clobbers a good one.
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from ofa.data.datasets import data_from_meta, make_loader
from ofa.export.budget import budget_verdict
from ofa.export.edge_formats import (
    Converted,
    FormatChecks,
    convert_and_check,
    format_files,
    format_targets,
    stage_format,
)
from ofa.export.model_card import render_model_card
from ofa.export.model_folder import FOLDER_CARD, FOLDER_ONNX, FolderContent, folder_layout, write_model_folder
from ofa.export.quantize import quantize_int8
from ofa.export.result import ExportResult, Preprocessing
from ofa.export.verify import PARITY_ATOL, Parity, ParityError, check_parity, eval_split, onnx_accuracy, resized_batches
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.subnet import FOLDER_WEIGHTS, count_macs, count_params, load_subnet, save_subnet
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.lut.timing import Standalone, measure_latencies, protocol_from_dict
from ofa.runtime.convert import DEFAULT_OPSET, build_metadata, check_onnx, check_opset, set_metadata, to_onnx
from ofa.runtime.formats import check_format, require
from ofa.runtime.runtimes import OrtModel
from ofa.train.bn import recalibrate_bn
from ofa.utils.errors import OFAError, SpaceError
from ofa.utils.io import file_sha256, write_json, write_text
from search.latency import LatencyTable

INT8_PRECISION = "int8 (QDQ, static, uint8 activations, per-channel int8 weights)"


@dataclass(frozen=True)
class ExportConfig:
    """Settings of one export, checked once (the messages are those ``ofa export`` prints).

    ``calib_batches`` training batches of ``batch_size`` recalibrate BN (0: keep the supernet's
    statistics) and calibrate INT8; ``parity_images`` test images and ``parity_random`` random inputs
    are compared between onnxruntime and PyTorch. ``checkpoint`` is the supernet file, whose sha256 is
    recorded (with ``--subnet`` the fine-tuned subnet file); ``arch_source`` names the arch in error messages.
    """

    out: Path = field(  # a folder (the model folder), or MODEL.onnx (today's files, the model folder beside as MODEL/)
        metadata={"metavar": "DIR|MODEL.onnx", "help": "model folder, or ONNX file (with its model folder beside it)"}
    )
    calib_batches: int = field(
        default=20,
        metadata={
            "metavar": "N",
            "help": "training batches for BN recalibration and INT8 calibration (0: keep the supernet's BN statistics)",
        },
    )
    batch_size: int = field(default=64, metadata={"metavar": "B", "help": "images per calibration batch"})
    int8: bool = field(default=False, metadata={"help": "also write an INT8 model (static post-training quantization)"})
    dynamic_batch: bool = field(default=False, metadata={"help": "make the batch dimension dynamic"})
    opset: int = field(default=DEFAULT_OPSET, metadata={"metavar": "K", "help": "ONNX opset, 13..20"})
    parity_images: int = 64
    parity_random: int = 16
    latency: bool = field(default=True, metadata={"help": "measure the latency (--no-latency: skip it)"})
    seed: int = field(default=0, metadata={"help": "seed of calibration order and random parity inputs"})
    progress: bool = False
    checkpoint: Path | None = None
    arch_source: str = "arch"
    formats: tuple[str, ...] = field(  # more formats besides ONNX (always written): openvino, executorch
        default=(),
        metadata={
            "flag": "--format",
            "repeat": True,
            "help": "formats to write, repeatable: onnx (always written), openvino (model.xml/.bin, OpenVINO CPU), "
            "executorch (model.pte, XNNPACK); each is checked and timed on its own runtime",
        },
    )

    @property
    def onnx_path(self) -> Path:
        folder, is_folder = folder_layout(self.out)
        return folder / FOLDER_ONNX if is_folder else self.out

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        folder_layout(self.out)
        check_opset(self.opset)
        if self.calib_batches < 0 or self.batch_size < 1:
            raise OFAError("--calib-batches must be >= 0 and --batch-size >= 1")
        if self.int8 and self.calib_batches == 0:
            raise OFAError("--int8 needs calibration images: --calib-batches must be > 0")
        try:
            chosen = tuple(dict.fromkeys(check_format(f) for f in self.formats if f != "onnx"))
        except OFAError as exc:
            raise OFAError(f"--format: {exc}") from None
        for fmt in chosen:
            require(fmt)
        object.__setattr__(self, "formats", chosen)


# --------------------------------------------------------------------------- checks of the inputs
def check_arch(space: SearchSpace, arch: Any, source: str = "arch") -> Arch:
    """The arch to export, or one clear error: the supernet itself is never exported.

    An arch stamped with another space's fingerprint was searched for another checkpoint; one
    without a fingerprint is judged by its values.
    """
    if arch is None or isinstance(arch, nn.Module):
        raise OFAError(
            f"{source}: no subnet arch given; the supernet itself is not exported "
            "(pick a subnet, e.g. the arch.json written by `ofa search`)"
        )
    if not isinstance(arch, Arch):
        raise OFAError(f"{source}: expected an Arch, got {type(arch).__name__}")
    if arch.space is not None and arch.space != space.fingerprint():
        raise OFAError(
            f"{source}: the arch does not fit the supernet's space {space.fingerprint()}: it was "
            f"searched for a checkpoint of another space ({arch.space})"
        )
    try:
        space.validate(arch, source)
    except SpaceError as exc:
        raise SpaceError(
            f"{exc} (the arch does not fit the supernet's space {space.fingerprint()}: a checkpoint of another space?)"
        ) from None
    return arch


def check_table_fits(table: LatencyTable, space: SearchSpace, arch: Arch) -> None:
    """The table must be measured for the supernet's space (its resolutions may be a subset) at the arch's."""
    measured = table.table_space
    if {**measured.to_dict(), "resolutions": None} != {**space.to_dict(), "resolutions": None}:
        raise OFAError(
            f"{table.source}: table was measured for space {measured.fingerprint()}, but the supernet's "
            f"space is {space.fingerprint()}"
        )
    if arch.resolution not in measured.resolutions:
        raise OFAError(
            f"{table.source}: table has no entries at resolution {arch.resolution} "
            f"(it covers {list(measured.resolutions)})"
        )


@dataclass(frozen=True)
class StaticSubnet:
    """A static timm subnet ready to convert, with what the files record about it.

    ``meta`` says how to feed it (mean, std, class names, resize); ``bn_batches`` is how many training
    batches recalibrated its BN here (0: kept); ``finetuned_sha256`` names a fine-tuned subnet file.
    """

    model: nn.Module
    space: SearchSpace
    arch: Arch
    meta: dict[str, Any]
    bn_batches: int = 0
    supernet_sha256: str | None = None
    finetuned_sha256: str | None = None


# --------------------------------------------------------------------------- the whole export
def export_subnet(
    net: OFAMobileNetV3, arch: Arch, cfg: ExportConfig, data: Any = None, table: LatencyTable | None = None
) -> ExportResult:
    """Export subnet ``arch`` of ``net`` to ``cfg.out`` (.onnx) and verify it; see the module docstring.

    ``data`` is a `ofa.data.datasets.DataBundle`: its train split recalibrates BN and calibrates INT8, its
    test split gives the real parity inputs and the accuracy; without it BN statistics stay the
    supernet's and only random inputs are checked. ``table`` (a `LatencyTable` of the supernet's
    space): latency is measured standalone, as a user measures it, with the table's backend, threads
    and batch, and reported beside its prediction; a fixed-batch model takes its batch size. Raises
    `OFAError` for an arch or table of another space and INT8 without data, and `ParityError` (writing
    nothing) when onnxruntime and PyTorch disagree.
    """
    arch = check_arch(net.space, arch, cfg.arch_source)
    _check_inputs(net.space, arch, cfg, data, table)
    model, bn_batches = _static_subnet(net, arch, cfg, data)
    subject = StaticSubnet(
        model,
        net.space,
        arch,
        getattr(net, "meta", None) or {},
        bn_batches,
        file_sha256(cfg.checkpoint) if cfg.checkpoint else None,
    )
    return _export_static(subject, cfg, data, table)


def export_finetuned(
    model: nn.Module, cfg: ExportConfig, data: Any = None, table: LatencyTable | None = None
) -> ExportResult:
    """Export a fine-tuned subnet (`ofa.load_subnet` of what `ofa finetune` wrote) as it is.

    The same conversion, parity, accuracy, INT8 and latency steps as `export_subnet`, but BN is not
    recalibrated: fine-tuning gave the subnet its own statistics. ``data`` and ``table`` as there;
    ``cfg.checkpoint`` is the subnet file (its sha256 is recorded beside the supernet's). Raises
    `OFAError` for a model without the subnet file's metadata, and as `export_subnet`.
    """
    meta = getattr(model, "ofa_meta", None)
    if not isinstance(meta, dict) or not isinstance(meta.get("space"), SearchSpace):
        raise OFAError(f"{cfg.checkpoint or 'model'}: not a subnet loaded with ofa.load_subnet (no space/arch meta)")
    space = meta["space"]
    arch = check_arch(space, meta["arch"], cfg.arch_source)
    _check_inputs(space, arch, cfg, data, table)
    subject = StaticSubnet(
        model.eval(),
        space,
        arch,
        meta,
        0,
        meta.get("supernet_sha256"),
        file_sha256(cfg.checkpoint) if cfg.checkpoint else None,
    )
    return _export_static(subject, cfg, data, table)


def _check_inputs(space: SearchSpace, arch: Arch, cfg: ExportConfig, data: Any, table: LatencyTable | None) -> None:
    """What must hold before any work: the table fits the space and arch; INT8 has calibration images."""
    if table is not None:
        check_table_fits(table, space, arch)
    if cfg.int8 and data is None:
        raise OFAError(
            f"--int8 needs training images for calibration, and {cfg.checkpoint or 'the supernet'} records no data"
        )


def _export_static(subject: StaticSubnet, cfg: ExportConfig, data: Any, table: LatencyTable | None) -> ExportResult:
    """Convert, verify, measure and write one static subnet (the steps after BN recalibration)."""
    model, space, arch = subject.model, subject.space, subject.arch
    table_batch = int(table.meta.get("batch", 1)) if table is not None else 1
    split = eval_split(data) if data is not None else None
    proto = to_onnx(model, space.in_channels, arch.resolution, cfg.opset, None if cfg.dynamic_batch else table_batch)
    check_onnx(proto)
    runner = OrtModel(proto)
    inputs = _parity_inputs(arch, space, cfg, split)
    parity = _parity(model, runner, inputs, cfg)
    result = _new_result(subject, cfg, parity, table)
    fp32_preds = _accuracy(result, runner, split, cfg)
    int8_proto, calibration_images = _int8(result, proto, runner, cfg, data, split, fp32_preds)
    if cfg.latency:
        models = {"fp32": proto, **({"int8": int8_proto} if int8_proto is not None else {})}
        measured = measure_latencies(
            models, model, (table_batch, space.in_channels, arch.resolution, arch.resolution), table
        )
        result.latency_fp32, result.latency_int8 = measured["fp32"], measured.get("int8")
        result.extra["latency"] = {name: asdict(lat) for name, lat in measured.items()}
        result.budget = budget_verdict(arch, result.latency_fp32, table, str(cfg.checkpoint or "SUPERNET"))
        if result.budget is not None and result.budget.over_budget:
            print(f"{cfg.onnx_path.name}: warning: {result.budget.line()}", file=sys.stderr)
    prep = Preprocessing.of(subject.meta, data, space.num_classes)
    _add_metadata(result, proto, int8_proto, space, prep, calibration_images)
    checks = FormatChecks(
        model,
        proto,
        (table_batch, space.in_channels, arch.resolution, arch.resolution),
        *inputs,
        test=_loader(split, cfg.batch_size, False, cfg.seed) if split is not None else None,
        onnx_preds=fp32_preds,
        protocol=_table_protocol(table) if cfg.latency else None,
        threads=int(table.meta.get("threads", 1)) if table is not None else 1,
        progress=cfg.progress,
    )
    converted = [convert_and_check(fmt, checks, str(cfg.out)) for fmt in cfg.formats]
    result.formats = [
        replace(c.result, files=[str(f) for f in format_files(c.format, result.folder, result.onnx_path)])
        for c in converted
    ]
    _write_all(result, proto, int8_proto, model, space, prep, converted)
    return result


def _table_protocol(table: LatencyTable | None) -> Standalone:
    """The table's protocol where it was built standalone, else the default: the other formats are timed so."""
    stored = table.meta.get("protocol") if table is not None else None
    protocol = protocol_from_dict(stored, "table meta.protocol") if stored is not None else None
    return protocol if isinstance(protocol, Standalone) else Standalone()


def _loader(dataset: Dataset, batch_size: int, shuffle: bool, seed: int) -> DataLoader:
    return make_loader(dataset, batch_size, shuffle=shuffle, seed=seed)


def _static_subnet(net: OFAMobileNetV3, arch: Arch, cfg: ExportConfig, data: Any) -> tuple[nn.Module, int]:
    """The timm subnet in eval mode, BN recalibrated on training images when there are any."""
    model = net.extract(arch).eval()
    bn_batches = 0
    if data is not None and cfg.calib_batches > 0:
        calib = _loader(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed)
        bar = tqdm(
            itertools.islice(calib, cfg.calib_batches),
            total=cfg.calib_batches,
            desc="BN recalibration",
            unit="batch",
            disable=not cfg.progress,
            leave=False,
        )
        bn_batches = recalibrate_bn(model, bar, cfg.calib_batches, resolution=arch.resolution)
        model.eval()
    return model, bn_batches


def _parity_inputs(
    arch: Arch, space: SearchSpace, cfg: ExportConfig, split: Dataset | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(test images, seeded random inputs) every runtime's parity check runs on."""
    shape = (space.in_channels, arch.resolution, arch.resolution)
    real = torch.zeros(0, *shape)
    if split is not None and cfg.parity_images > 0:
        batches = resized_batches(_loader(split, cfg.batch_size, False, cfg.seed), arch.resolution, cfg.parity_images)
        real = torch.cat([x for x, _ in batches])
    return real, torch.randn(cfg.parity_random, *shape, generator=torch.Generator().manual_seed(cfg.seed))


def _parity(model: nn.Module, runner: OrtModel, inputs: tuple[torch.Tensor, torch.Tensor], cfg: ExportConfig) -> Parity:
    """Parity on test images and seeded random inputs; `ParityError` if onnxruntime and PyTorch disagree."""
    parity = check_parity(model, runner, *inputs, progress=cfg.progress)
    if not parity.ok:
        raise ParityError(
            f"{cfg.out}: onnxruntime does not match PyTorch: max |logit diff| {parity.max_abs_diff:.3g} "
            f"(allowed {PARITY_ATOL:g}), top-1 identical on {100 * parity.top1_agreement:.1f}% of "
            f"{parity.real_inputs + parity.random_inputs} inputs; nothing written"
        )
    return parity


def _new_result(subject: StaticSubnet, cfg: ExportConfig, parity: Parity, table: LatencyTable | None) -> ExportResult:
    out, arch, space, model = cfg.onnx_path, subject.arch, subject.space, subject.model
    folder, is_folder = folder_layout(cfg.out)
    result = ExportResult(
        onnx_path=out,
        subnet_path=folder / FOLDER_WEIGHTS if is_folder else out.with_suffix(".pt"),
        card_path=folder / FOLDER_CARD if is_folder else out.with_suffix(".md"),
        folder=folder,
        summary_path=out.with_suffix(".export.json"),
        arch=arch,
        opset=cfg.opset,
        dynamic_batch=cfg.dynamic_batch,
        bn_batches=subject.bn_batches,
        parity=parity,
        macs=count_macs(model, arch.resolution, space.in_channels),
        params=count_params(model),
        predicted_top1=_float(arch.extra.get("predicted_top1")),
        supernet_sha256=subject.supernet_sha256,
        finetuned_sha256=subject.finetuned_sha256,
        space_fingerprint=space.fingerprint(),
        predicted_latency_ms=_float(arch.extra.get("latency_ms")),
        table=arch.extra.get("lut"),
    )
    if table is not None:
        result.predicted_latency_ms = float(table.predict(arch))
        result.table = str(table.source or result.table or "")
        result.table_noise_pct = table.noise_pct()
    return result


def _accuracy(result: ExportResult, runner: OrtModel, split: Dataset | None, cfg: ExportConfig) -> np.ndarray | None:
    """Top-1 of the fp32 ONNX model on the test split into ``result``; its predictions (None without a split)."""
    if split is None:
        return None
    loader = _loader(split, cfg.batch_size, False, cfg.seed)
    result.top1_fp32, preds = onnx_accuracy(runner, loader, result.arch.resolution, cfg.progress, "fp32 accuracy")
    result.test_images = len(preds)
    return preds


def _int8(
    result: ExportResult,
    proto: onnx.ModelProto,
    runner: OrtModel,
    cfg: ExportConfig,
    data: Any,
    split: Dataset | None,
    fp32_preds: np.ndarray | None,
) -> tuple[onnx.ModelProto | None, int]:
    """The INT8 model (checked, its accuracy and agreement with fp32 into ``result``) and its calibration images."""
    if not cfg.int8:
        return None, 0
    resolution = result.arch.resolution
    calibration = _calibration_batches(
        data.train, runner.batch or cfg.batch_size, cfg.calib_batches * cfg.batch_size, resolution, cfg.seed
    )
    int8_proto = quantize_int8(proto, calibration, progress=cfg.progress)
    check_onnx(int8_proto, "INT8 model")
    result.int8_path = result.onnx_path.with_suffix(".int8.onnx")
    if split is not None:
        loader = _loader(split, cfg.batch_size, False, cfg.seed)
        result.top1_int8, int8_preds = onnx_accuracy(
            OrtModel(int8_proto), loader, resolution, cfg.progress, "int8 accuracy"
        )
        result.int8_top1_agreement = float((int8_preds == fp32_preds).mean())
    return int8_proto, sum(len(b) for b in calibration)


def _calibration_batches(train: Dataset, batch: int, images: int, resolution: int, seed: int) -> list[np.ndarray]:
    """Training images for INT8 calibration, shaped into batches the model's input accepts."""
    xs = [x for x, _ in resized_batches(_loader(train, 256, True, seed), resolution, images)]
    if not xs:
        raise OFAError("INT8 calibration: the training split is empty")
    stacked = torch.cat(xs).numpy()
    return [stacked[i : i + batch] for i in range(0, len(stacked) - batch + 1, batch)] or [stacked]


def _add_metadata(
    result: ExportResult,
    proto: onnx.ModelProto,
    int8_proto: onnx.ModelProto | None,
    space: SearchSpace,
    prep: Preprocessing,
    calibration_images: int,
) -> None:
    """Everything needed to feed the models and trace them back, into their ``metadata_props``."""
    values = {
        "supernet_sha256": result.supernet_sha256,
        "predicted_top1": result.predicted_top1,
        "predicted_latency_ms": result.predicted_latency_ms,
        "latency_table": result.table,
        "macs": result.macs,
        "params": result.params,
        "bn_recalibration_batches": result.bn_batches,
        "top1_fp32": result.top1_fp32,
        "latency_ms_fp32": result.latency_fp32 and result.latency_fp32.mean_ms,
        "parity_max_abs_diff": result.parity.max_abs_diff,
        "opset": result.opset,
        "preprocess": prep.resize,
        "finetuned_sha256": result.finetuned_sha256,
    }

    def props(extra: dict[str, Any]) -> dict[str, str]:
        return build_metadata(
            space, result.arch, mean=prep.mean, std=prep.std, class_names=prep.class_names, values={**values, **extra}
        )

    set_metadata(proto, props({"precision": "fp32"}))
    if int8_proto is not None:
        set_metadata(
            int8_proto,
            props(
                {
                    "precision": INT8_PRECISION,
                    "top1_int8": result.top1_int8,
                    "latency_ms_int8": result.latency_int8 and result.latency_int8.mean_ms,
                    "int8_calibration_images": calibration_images,
                }
            ),
        )


def _write_all(
    result: ExportResult,
    proto: onnx.ModelProto,
    int8_proto: onnx.ModelProto | None,
    model: nn.Module,
    space: SearchSpace,
    prep: Preprocessing,
    converted: Sequence[Converted] = (),
) -> None:
    """Write every file into a temp folder beside the output, then rename them all into place.

    The model folder always; with ``--out MODEL.onnx`` also today's files beside it; the other formats in both.
    """
    subnet_meta = {
        "mean": prep.mean,
        "std": prep.std,
        "class_names": prep.class_names,
        "supernet_sha256": result.supernet_sha256,
        "bn_recalibration_batches": result.bn_batches,
        "top1": result.top1_fp32,
        "space_fingerprint": space.fingerprint(),
        **({"preprocess": prep.resize} if prep.resize else {}),
        **({"finetuned_sha256": result.finetuned_sha256} if result.finetuned_sha256 else {}),
    }
    out, folder = result.onnx_path, result.folder
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.stem}.", dir=out.parent) as tmp:
        staged: list[tuple[Path, Path]] = []

        def stage(target: Path) -> Path:
            staged.append((Path(tmp) / f"{len(staged)}-{target.name}", target))
            return staged[-1][0]

        if folder != out.parent:
            onnx.save(proto, stage(result.onnx_path))
            if int8_proto is not None and result.int8_path is not None:
                onnx.save(int8_proto, stage(result.int8_path))
            save_subnet(model, space, result.arch, stage(result.subnet_path), meta=subnet_meta)
            write_text(stage(result.card_path), render_model_card(result, space, prep))
            write_json(stage(result.summary_path), result.to_dict())
        write_model_folder(FolderContent(result, model, space, prep, proto, int8_proto), folder, stage)
        for c in converted:
            stage_format(c, format_targets(c.format, folder, out), stage)
        for src, dst in staged:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# --------------------------------------------------------------------------- from files (the CLI)
def export_file(
    supernet: Path | None, arch: Path | None, cfg: ExportConfig, lut: Path | None = None, subnet: Path | None = None
) -> ExportResult:
    """`export_subnet` from files: the supernet (its meta names the data), an arch JSON and an optional table;
    or, given ``subnet`` (a file `ofa finetune` wrote) instead of both, `export_finetuned` of that subnet.

    Without ``lut`` the arch's ``lut`` field names the table (as written, or relative to the arch file)
    when that file exists. Notes on what is missing go to stderr; bad files raise `OFAError`.
    """
    if subnet is not None:
        return _export_finetuned_file(subnet, supernet, arch, cfg, lut)
    if supernet is None:
        raise OFAError("--supernet (with --arch) or --subnet (a subnet file written by `ofa finetune`) is required")
    if arch is None:
        raise OFAError(
            "--arch is required: the supernet itself is not exported; give a subnet's arch JSON "
            "(e.g. written by `ofa search`)"
        )
    chosen = load_arch_file(arch)
    net = OFAMobileNetV3.load(supernet).eval()
    cfg = replace(cfg, checkpoint=Path(supernet), arch_source=str(arch))
    chosen = check_arch(net.space, chosen, str(arch))
    if chosen.space is None:
        _note(
            f"{arch}: names no space fingerprint (a hand-written or converted arch?); checked against the "
            "supernet's space by its values only"
        )
    table_path = _find_table(lut, chosen, arch)
    table = LatencyTable.load(table_path) if table_path is not None else None
    return export_subnet(net, chosen, cfg, data=_load_data(net.meta, supernet), table=table)


def _export_finetuned_file(
    subnet: Path, supernet: Path | None, arch: Path | None, cfg: ExportConfig, lut: Path | None
) -> ExportResult:
    """`export_finetuned` of a subnet file; its meta names the data it was fine-tuned on."""
    if supernet is not None or arch is not None:
        raise OFAError(
            f"--subnet {subnet}: a subnet file carries its own arch and weights; give it without --supernet and --arch"
        )
    model = load_subnet(subnet)
    cfg = replace(cfg, checkpoint=Path(subnet), arch_source=f"{subnet}:arch")
    table_path = _find_table(lut, model.ofa_meta["arch"], Path(subnet))
    table = LatencyTable.load(table_path) if table_path is not None else None
    return export_finetuned(model, cfg, data=_load_data(model.ofa_meta, subnet, supernet=False), table=table)


def load_arch_file(path: str | Path) -> Arch:
    """Read an arch JSON; a supernet checkpoint passed instead is named as such."""
    path = Path(path)
    if not path.is_file():
        raise OFAError(f"{path}: arch file not found")
    with path.open("rb") as fh:
        head = fh.read(4)
    if head.startswith(b"PK") or head.startswith(b"\x80") or path.suffix == ".safetensors":
        kind = "a safetensors weights file" if path.suffix == ".safetensors" else "a PyTorch checkpoint"
        raise OFAError(
            f"{path}: this is {kind}, not an arch JSON; the supernet itself is not "
            "exported (give the subnet's arch.json, e.g. from `ofa search`)"
        )
    try:
        return Arch.load(path)
    except UnicodeDecodeError:
        raise OFAError(f"{path}: not an arch JSON (binary file)") from None


def _note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def _find_table(lut: Path | None, arch: Arch, arch_path: Path) -> Path | None:
    """``lut``, else the arch's ``lut`` field (as written, or relative to the arch file) when it exists."""
    if lut:
        return Path(lut)
    name = arch.extra.get("lut")
    if not isinstance(name, str):
        return None
    for candidate in (Path(name), arch_path.parent / name):
        if candidate.is_file():
            return candidate
    _note(
        f"{arch_path}: its latency table {name} does not exist here; latency is measured with the default "
        "protocol and not compared with a prediction"
    )
    return None


def _load_data(meta: dict[str, Any], ckpt: Path, supernet: bool = True) -> Any:
    """The data a supernet or subnet file was trained on, from its meta; None (with a note) when unrecorded."""
    if meta.get("data"):
        return data_from_meta(meta)
    if meta.get("bn_recalibration"):
        print(
            f"WARNING: {ckpt} is an imported supernet that records no training images: this subnet keeps the "
            "whole supernet's BN statistics and its accuracy WILL SUFFER. Fine-tune on your data first "
            "(`ofa train` with init.supernet, or `ofa finetune`), which records the images for recalibration.",
            file=sys.stderr,
        )
    kept = "BN statistics stay the supernet's, " if supernet else ""
    _note(f"{ckpt} records no training data: {kept}parity uses random inputs only and accuracy is not measured")
    return None
