"""An exported subnet in more formats (OpenVINO, ExecuTorch), each checked on its own runtime.

Each format is converted from the same static subnet (OpenVINO from the ONNX model, with its metadata;
ExecuTorch from the module, the metadata as a constant method), then held to the ONNX model's bar on
its own runtime: max |logit diff| to PyTorch within `parity_tolerance` and the same top-1 on the
parity inputs, and on the test split the very predictions of the ONNX model. Its latency is measured standalone on
that runtime. Nothing is written here: export writes every file only after every check passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from ofa.export.result import FormatExport
from ofa.export.verify import ParityError, check_parity, onnx_accuracy
from ofa.lut.measure import Latency, latency_of, latency_source
from ofa.lut.protocols import time_models
from ofa.lut.timing import Standalone
from ofa.runtime import formats
from ofa.runtime.runtimes import CallRunner

FOLDER_STEM = "model"  # model folder files: model.xml/.bin, model.pte beside model.onnx


@dataclass(frozen=True)
class FormatChecks:
    """What every format is checked on: the static subnet, its ONNX model (with metadata), the inputs."""

    model: nn.Module
    onnx_model: onnx.ModelProto
    shape: tuple[int, int, int, int]  # (batch, channels, resolution, resolution) of the exported model
    real: torch.Tensor  # test images the ONNX parity used
    noise: torch.Tensor  # random inputs the ONNX parity used
    test: Iterable | None = None  # labelled test batches (a loader), None without data
    onnx_preds: np.ndarray | None = None  # the ONNX model's test-split predictions
    protocol: Standalone | None = None  # None: no latency measurement
    threads: int = 1
    progress: bool = False


@dataclass(frozen=True)
class Converted:
    """A format's model, ready to write, and what its checks found."""

    format: str
    model: Any
    result: FormatExport


def convert_and_check(fmt: str, checks: FormatChecks, where: str) -> Converted:
    """``fmt`` of the subnet, checked (see module doc); `ParityError` naming ``where`` when it disagrees."""
    metadata = {p.key: p.value for p in checks.onnx_model.metadata_props}
    model = formats.convert(fmt, checks.model, checks.shape, checks.onnx_model.SerializeToString(), metadata)
    infer = formats.load_infer(fmt, model, checks.threads)
    runner = formats.FormatModel(infer, checks.shape[0])
    runtime = f"{formats.RUNTIME[fmt]} {formats.runtime_version(fmt)}"
    parity = check_parity(checks.model, runner, checks.real, checks.noise, progress=checks.progress)
    if not parity.ok:
        raise ParityError(
            f"{where}: {runtime} ({fmt}) does not match PyTorch: max |logit diff| "
            f"{parity.max_abs_diff:.3g} (allowed {parity.allowed:.3g}), top-1 identical on "
            f"{100 * parity.top1_agreement:.1f}% of {parity.real_inputs + parity.random_inputs} "
            "inputs; nothing written"
        )
    top1 = None
    if checks.test is not None and checks.onnx_preds is not None:
        top1, preds = onnx_accuracy(runner, checks.test, checks.shape[-1], checks.progress, f"{fmt} accuracy")
        differ = int((preds != checks.onnx_preds).sum())
        if differ:
            raise ParityError(
                f"{where}: {runtime} ({fmt}) predicts another class than the ONNX model on {differ} "
                f"of {len(preds)} test images; nothing written"
            )
    latency = _latency(fmt, infer, checks, runtime) if checks.protocol is not None else None
    return Converted(fmt, model, FormatExport(fmt, runtime, [], parity, top1, latency))


def _latency(fmt: str, infer: Callable[[np.ndarray], np.ndarray], checks: FormatChecks, runtime: str) -> Latency:
    protocol = checks.protocol
    runner = CallRunner(infer, checks.shape, checks.threads, fmt in formats.WORKER_THREADS)
    stats = time_models({fmt: runner}, protocol)[fmt]
    source = latency_source(protocol, f"{formats.FORMAT_BACKEND[fmt]} ({runtime})")
    return latency_of(stats, checks.shape[0], checks.threads, source)


def stage_format(converted: Converted, targets: Iterable[Path], stage: Callable[[Path], Path]) -> None:
    """Write ``converted`` to every target through export's ``stage`` (target → temp path); OpenVINO's .bin,
    written beside its .xml, is staged too."""
    for target in targets:
        written = formats.write(converted.format, converted.model, stage(target))
        for extra in written[1:]:
            extra.replace(stage(target.with_suffix(extra.suffix)))


def format_files(fmt: str, folder: Path, onnx_path: Path) -> list[Path]:
    """Every file ``fmt`` writes (OpenVINO's .bin too), in the order `format_targets` gives them."""
    suffixes = (".xml", ".bin") if fmt == "openvino" else (formats.SUFFIX[fmt],)
    return [target.with_suffix(s) for target in format_targets(fmt, folder, onnx_path) for s in suffixes]


def format_targets(fmt: str, folder: Path, onnx_path: Path) -> list[Path]:
    """Where ``fmt`` goes: the model folder, and beside MODEL.onnx when that is outside the folder."""
    suffix = formats.SUFFIX[fmt]
    targets = [folder / f"{FOLDER_STEM}{suffix}"]
    if onnx_path.parent != folder:
        targets.append(onnx_path.with_suffix(suffix))
    return targets
