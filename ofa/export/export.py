"""Export one subnet of a supernet to ONNX with no retraining, verified end to end.

The arch is checked once, at the entry (`check_arch`, with the table and INT8 inputs); every later step
trusts it and gives a value: the static subnet (extracted, BN recalibrated on training images; a subnet
fine-tuned on its own by `ofa finetune` keeps its statistics) → the ONNX model (`ofa.runtime.convert`,
through ``onnx.checker``'s full check) → onnxruntime vs PyTorch parity on real and random inputs
(`ofa.export.verify`) → test-split accuracy → optional INT8 (`ofa.runtime.quantize`) → measured latency
and the budget verdict (`ofa.lut.timing`, `ofa.export.budget`) → metadata in the models → the other
formats, each checked on its own runtime (`ofa.export.edge_formats`). The `ExportResult` is built once
from those values, then every file is written at once (`ofa.export.write`): a model folder for timm and
the Hub (`ofa.export.model_folder`), and with ``--out MODEL.onnx`` also the static PyTorch subnet, a model
card and the summary next to the ``.onnx``. Nothing is written unless every check passed.
"""

from __future__ import annotations

import functools
import itertools
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import nn
from tqdm import tqdm

from ofa.data.loaders import make_loader
from ofa.export.budget import budget_verdict
from ofa.export.edge_formats import Converted, FormatChecks, convert_and_check, format_files
from ofa.export.model_folder import FOLDER_CARD, FOLDER_ONNX, FolderContent, folder_layout
from ofa.export.result import ExportResult, Preprocessing
from ofa.export.steps import (
    Accuracy,
    Int8Model,
    Measured,
    StaticSubnet,
    TestSplit,
    Timing,
    accuracy,
    int8_model,
    parity_inputs,
    prediction,
    table_protocol,
)
from ofa.export.verify import Parity, ParityError, check_parity, eval_split
from ofa.export.write import with_metadata, write_export
from ofa.families.counts import count_macs, count_params
from ofa.families.family import Arch, Space, Supernet
from ofa.families.registry import family_of, is_space
from ofa.families.subnet_file import FOLDER_WEIGHTS
from ofa.lut.measure import measure_latencies
from ofa.runtime.convert import DEFAULT_OPSET, check_onnx, check_opset, to_onnx
from ofa.runtime.formats import check_format, require
from ofa.runtime.runtimes import OrtModel
from ofa.train.bn import recalibrate_bn
from ofa.utils.errors import OFAError, SpaceError
from ofa.utils.fields import field_label
from ofa.utils.io import file_sha256
from search.latency import LatencyTable


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
        label = functools.partial(field_label, ExportConfig)
        if self.calib_batches < 0:
            raise OFAError(f"{label('calib_batches')}: must be >= 0, got {self.calib_batches}")
        if self.batch_size < 1:
            raise OFAError(f"{label('batch_size')}: must be >= 1, got {self.batch_size}")
        if self.int8 and self.calib_batches == 0:
            raise OFAError(f"{label('int8')} needs calibration images: {label('calib_batches')} must be > 0")
        try:
            chosen = tuple(dict.fromkeys(check_format(f) for f in self.formats if f != "onnx"))
        except OFAError as exc:
            raise OFAError(f"{label('formats')}: {exc}") from None
        for fmt in chosen:
            require(fmt)
        object.__setattr__(self, "formats", chosen)


# --------------------------------------------------------------------------- the one check of the inputs
def check_arch(space: Space, arch: Any, source: str = "arch") -> Arch:
    """The arch to export, or one clear error: the supernet itself is never exported.

    An arch stamped with another space's fingerprint was searched for another checkpoint; one
    without a fingerprint is judged by its values.
    """
    if arch is None or isinstance(arch, nn.Module):
        raise OFAError(
            f"{source}: no subnet arch given; the supernet itself is not exported "
            "(pick a subnet, e.g. the arch.json written by `ofa search`)"
        )
    arch_type = family_of(space).arch_type
    if not isinstance(arch, arch_type):
        raise OFAError(f"{source}: expected an {arch_type.__name__}, got {type(arch).__name__}")
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


def check_table_fits(table: LatencyTable, space: Space, arch: Arch) -> None:
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


# --------------------------------------------------------------------------- the whole export
def export_subnet(
    net: Supernet, arch: Arch, cfg: ExportConfig, data: Any = None, table: LatencyTable | None = None
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
    return _export_static(_static_subnet(net, arch, cfg, data), cfg, data, table)


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
    if not isinstance(meta, dict) or not is_space(meta.get("space")):
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


def _check_inputs(space: Space, arch: Arch, cfg: ExportConfig, data: Any, table: LatencyTable | None) -> None:
    """What must hold before any work: the table fits the space and arch (an INT8 one predicts the INT8 model,
    so it needs --int8, and must be onnxruntime's, whose QDQ model export ships); INT8 has calibration images."""
    if table is not None:
        check_table_fits(table, space, arch)
        if table.dtype == "int8" and not cfg.int8:
            raise OFAError(
                f"{table.source}: an INT8 latency table predicts the INT8 model's latency: add --int8 "
                "(or give a float32 table with --lut)"
            )
        if table.dtype == "int8" and table.meta.get("backend") != "ort-cpu":
            raise OFAError(
                f"{table.source}: an INT8 table of {table.meta.get('backend')!r} predicts models quantized by that "
                "runtime's own tools, and --int8 ships onnxruntime's QDQ model: give an ort-cpu INT8 table "
                "(or a float32 one) with --lut"
            )
    if cfg.int8 and data is None:
        raise OFAError(
            f"--int8 needs training images for calibration, and {cfg.checkpoint or 'the supernet'} records no data"
        )


def _export_static(subject: StaticSubnet, cfg: ExportConfig, data: Any, table: LatencyTable | None) -> ExportResult:
    """The steps after the static subnet, each giving a value; the result is built from them, then written."""
    model, space, arch = subject.model, subject.space, subject.arch
    batch = int(table.meta.get("batch", 1)) if table is not None else 1
    shape = (batch, space.in_channels, arch.resolution, arch.resolution)
    found = eval_split(data) if data is not None else None
    split = TestSplit(found, cfg.batch_size, cfg.seed, cfg.progress) if found is not None else None
    proto = _onnx_model(subject, cfg, shape[0])
    runner = OrtModel(proto)
    inputs = parity_inputs(shape[1:], split, cfg.parity_images, cfg.parity_random, cfg.seed)
    parity = _parity(model, runner, inputs, cfg)
    fp32 = accuracy(runner, split, arch.resolution, "fp32 accuracy")
    int8 = _int8(proto, runner, cfg, data, split, fp32, arch.resolution) if cfg.int8 else None
    timing = _timing(subject, proto, int8, shape, cfg, table) if cfg.latency else None
    macs, params = count_macs(model, arch.resolution, space.in_channels), count_params(model)
    measured = Measured(parity, macs, params, fp32, int8, timing, prediction(arch, table))
    prep = Preprocessing.of(subject.meta, data, space.num_classes)
    fp32_proto, int8_proto = with_metadata(proto, subject, prep, measured, cfg.opset)
    checks = FormatChecks(
        model,
        fp32_proto,
        shape,
        *inputs,
        test=split.loader() if split is not None else None,
        onnx_preds=fp32.preds if fp32 is not None else None,
        protocol=table_protocol(table) if cfg.latency else None,
        threads=int(table.meta.get("threads", 1)) if table is not None else 1,
        progress=cfg.progress,
    )
    converted = [convert_and_check(fmt, checks, str(cfg.out)) for fmt in cfg.formats]
    result = _result(subject, cfg, measured, converted)
    write_export(FolderContent(result, model, space, prep, fp32_proto, int8_proto), converted)
    return result


def _static_subnet(net: Supernet, arch: Arch, cfg: ExportConfig, data: Any) -> StaticSubnet:
    """The timm subnet of a checked arch in eval mode, BN recalibrated on training images when there are any."""
    model = net.extract_checked(arch).eval()
    bn_batches = 0
    if data is not None and cfg.calib_batches > 0:
        calib = make_loader(data.calib, cfg.batch_size, shuffle=True, seed=cfg.seed)
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
    sha256 = file_sha256(cfg.checkpoint) if cfg.checkpoint else None
    return StaticSubnet(model, net.space, arch, getattr(net, "meta", None) or {}, bn_batches, sha256)


def _onnx_model(subject: StaticSubnet, cfg: ExportConfig, batch: int) -> onnx.ModelProto:
    """The ONNX model through ``onnx.checker``'s full check; a fixed batch is the table's."""
    space, resolution = subject.space, subject.arch.resolution
    proto = to_onnx(subject.model, space.in_channels, resolution, cfg.opset, None if cfg.dynamic_batch else batch)
    check_onnx(proto)
    return proto


def _parity(model: nn.Module, runner: OrtModel, inputs: tuple[torch.Tensor, torch.Tensor], cfg: ExportConfig) -> Parity:
    """Parity on test images and seeded random inputs; `ParityError` if onnxruntime and PyTorch disagree."""
    parity = check_parity(model, runner, *inputs, progress=cfg.progress)
    if not parity.ok:
        raise ParityError(
            f"{cfg.out}: onnxruntime does not match PyTorch: max |logit diff| {parity.max_abs_diff:.3g} "
            f"(allowed {parity.allowed:.3g}), top-1 identical on {100 * parity.top1_agreement:.1f}% of "
            f"{parity.real_inputs + parity.random_inputs} inputs; nothing written"
        )
    return parity


def _int8(
    proto: onnx.ModelProto,
    runner: OrtModel,
    cfg: ExportConfig,
    data: Any,
    split: TestSplit | None,
    fp32: Accuracy | None,
    resolution: int,
) -> Int8Model:
    """The INT8 model, calibrated on training images and checked, with its accuracy and agreement with fp32."""
    batch, wanted = runner.batch or cfg.batch_size, cfg.calib_batches * cfg.batch_size
    int8_proto, images = int8_model(proto, data.calib, batch, wanted, resolution, cfg.seed, cfg.progress)
    int8 = accuracy(OrtModel(int8_proto), split, resolution, "int8 accuracy")
    if int8 is None or fp32 is None:
        return Int8Model(int8_proto, images)
    return Int8Model(int8_proto, images, int8, float((int8.preds == fp32.preds).mean()))


def _timing(
    subject: StaticSubnet,
    proto: onnx.ModelProto,
    int8: Int8Model | None,
    shape: tuple[int, int, int, int],
    cfg: ExportConfig,
    table: LatencyTable | None,
) -> Timing:
    """Standalone latency of the models (as the table was measured), and the verdict against the budget."""
    models = {"fp32": proto, **({"int8": int8.proto} if int8 is not None else {})}
    measured = measure_latencies(models, subject.model, shape, table)
    searched = "int8" if table is not None and table.dtype == "int8" else "fp32"  # the model the budget was for
    budget = budget_verdict(subject.arch, measured.get(searched), table, str(cfg.checkpoint or "SUPERNET"))
    if budget is not None and budget.over_budget:
        print(f"{cfg.onnx_path.name}: warning: {budget.line()}", file=sys.stderr)
    return Timing(measured["fp32"], measured.get("int8"), measured, budget)


def _result(subject: StaticSubnet, cfg: ExportConfig, measured: Measured, converted: list[Converted]) -> ExportResult:
    """The export's result, built once from the steps' values."""
    out, (folder, is_folder) = cfg.onnx_path, folder_layout(cfg.out)
    fp32, int8, timing, predicted = measured.fp32, measured.int8, measured.timing, measured.prediction
    int8_accuracy = int8.accuracy if int8 is not None else None
    return ExportResult(
        onnx_path=out,
        subnet_path=folder / FOLDER_WEIGHTS if is_folder else out.with_suffix(".pt"),
        card_path=folder / FOLDER_CARD if is_folder else out.with_suffix(".md"),
        summary_path=out.with_suffix(".export.json"),
        arch=subject.arch,
        opset=cfg.opset,
        dynamic_batch=cfg.dynamic_batch,
        bn_batches=subject.bn_batches,
        parity=measured.parity,
        macs=measured.macs,
        params=measured.params,
        int8_path=out.with_suffix(".int8.onnx") if int8 is not None else None,
        folder=folder,
        top1_fp32=fp32.top1 if fp32 is not None else None,
        top1_int8=int8_accuracy.top1 if int8_accuracy is not None else None,
        int8_top1_agreement=int8.agreement if int8 is not None else None,
        test_images=fp32.images if fp32 is not None else 0,
        latency_fp32=timing.fp32 if timing is not None else None,
        latency_int8=timing.int8 if timing is not None else None,
        predicted_top1=predicted.top1,
        predicted_latency_ms=predicted.latency_ms,
        table=predicted.table,
        table_dtype=predicted.dtype,
        supernet_sha256=subject.supernet_sha256,
        finetuned_sha256=subject.finetuned_sha256,
        space_fingerprint=subject.space.fingerprint(),
        formats=[replace(c.result, files=[str(f) for f in format_files(c.format, folder, out)]) for c in converted],
        table_noise_pct=predicted.table_noise_pct,
        budget=timing.budget if timing is not None else None,
        extra={"latency": {name: asdict(lat) for name, lat in timing.models.items()}} if timing is not None else {},
    )
