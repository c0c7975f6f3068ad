"""What each step of an export gives, as values: the export's result and metadata are built from them at the end.

The steps themselves run in `ofa.export.export`; those here need no export settings: the parity inputs,
the ONNX models' accuracy, INT8 calibration images, the table's prediction and protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ofa.data.loaders import make_loader
from ofa.export.result import BudgetVerdict
from ofa.export.verify import Inference, Parity, onnx_accuracy, resized_batches
from ofa.families.family import Arch, Space
from ofa.lut.measure import Latency
from ofa.lut.protocols import protocol_from_dict
from ofa.lut.timing import Standalone
from ofa.runtime.convert import check_onnx
from ofa.runtime.quantize import quantize_int8
from ofa.utils.errors import OFAError
from search.latency import LatencyTable


@dataclass(frozen=True)
class StaticSubnet:
    """A static timm subnet ready to convert, with what the files record about it.

    ``meta`` says how to feed it (mean, std, class names, resize); ``bn_batches`` is how many training
    batches recalibrated its BN here (0: kept); ``finetuned_sha256`` names a fine-tuned subnet file.
    ``arch`` was checked against ``space`` at the export's entry: no later step checks it again.
    """

    model: nn.Module
    space: Space
    arch: Arch
    meta: dict[str, Any]
    bn_batches: int = 0
    supernet_sha256: str | None = None
    finetuned_sha256: str | None = None


@dataclass(frozen=True)
class TestSplit:
    """The labelled split an export is measured on, read in the same fixed batches for every model."""

    dataset: Dataset
    batch_size: int
    seed: int
    progress: bool = False

    def loader(self) -> DataLoader:
        return make_loader(self.dataset, self.batch_size, shuffle=False, seed=self.seed)


@dataclass(frozen=True)
class Accuracy:
    """Top-1 (percent) of one model on the test split, and its prediction for every image."""

    top1: float
    preds: np.ndarray

    @property
    def images(self) -> int:
        return len(self.preds)


@dataclass(frozen=True)
class Int8Model:
    """The checked INT8 model, how many training images calibrated it, and (with a test split) its accuracy
    and the fraction of test images on which its top-1 is the fp32 model's."""

    proto: onnx.ModelProto
    calibration_images: int
    accuracy: Accuracy | None = None
    agreement: float | None = None


@dataclass(frozen=True)
class Timing:
    """Measured latency of the fp32 and INT8 models (``models``: every model timed, by name) and the
    verdict against the budget the subnet was searched for."""

    fp32: Latency
    int8: Latency | None
    models: dict[str, Latency]
    budget: BudgetVerdict | None


@dataclass(frozen=True)
class Prediction:
    """What the search predicted for the subnet: top-1, and latency by the table (given, or named by the arch)."""

    top1: float | None
    latency_ms: float | None
    table: Any  # the table's file (as the arch's ``lut`` field or the table names it)
    table_noise_pct: float | None
    dtype: str | None = None  # the given table's: ``latency_ms`` predicts the model of that dtype (fp32 or INT8)


@dataclass(frozen=True)
class Measured:
    """Every value the checks and measurements gave; None where a step did not run (no data, no --int8...)."""

    parity: Parity
    macs: int
    params: int
    fp32: Accuracy | None
    int8: Int8Model | None
    timing: Timing | None
    prediction: Prediction


def parity_inputs(
    shape: tuple[int, int, int], split: TestSplit | None, images: int, random: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(``images`` test images, ``random`` seeded random inputs) of ``shape``: every runtime's parity runs on them."""
    real = torch.zeros(0, *shape)
    if split is not None and images > 0:
        real = torch.cat([x for x, _ in resized_batches(split.loader(), shape[-1], images)])
    return real, torch.randn(random, *shape, generator=torch.Generator().manual_seed(seed))


def accuracy(runner: Inference, split: TestSplit | None, resolution: int, desc: str) -> Accuracy | None:
    """Top-1 of an exported model on the test split; None without one."""
    if split is None:
        return None
    top1, preds = onnx_accuracy(runner, split.loader(), resolution, split.progress, desc)
    return Accuracy(top1, preds)


def calibration_batches(train: Dataset, batch: int, images: int, resolution: int, seed: int) -> list[np.ndarray]:
    """Training images for INT8 calibration, shaped into batches the model's input accepts."""
    xs = [x for x, _ in resized_batches(make_loader(train, 256, shuffle=True, seed=seed), resolution, images)]
    if not xs:
        raise OFAError("INT8 calibration: the training split is empty")
    stacked = torch.cat(xs).numpy()
    return [stacked[i : i + batch] for i in range(0, len(stacked) - batch + 1, batch)] or [stacked]


def int8_model(
    proto: onnx.ModelProto, train: Dataset, batch: int, images: int, resolution: int, seed: int, progress: bool = False
) -> tuple[onnx.ModelProto, int]:
    """``proto`` in INT8 calibrated on ``images`` training images (`calibration_batches`), checked, and how many
    images calibrated it: the one recipe for ``ofa export --int8`` and INT8 accuracy data alike."""
    calibration = calibration_batches(train, batch, images, resolution, seed)
    quantized = quantize_int8(proto, calibration, progress=progress)
    check_onnx(quantized, "INT8 model")
    return quantized, sum(len(b) for b in calibration)


def prediction(arch: Arch, table: LatencyTable | None) -> Prediction:
    """The search's figures as the arch records them; the table's own prediction (and noise) when it is given."""
    top1, named = _float(arch.extra.get("predicted_top1")), arch.extra.get("lut")
    if table is None:
        return Prediction(top1, _float(arch.extra.get("latency_ms")), named, None)
    return Prediction(
        top1, float(table.predict(arch)), str(table.source or named or ""), table.noise_pct(), table.dtype
    )


def table_protocol(table: LatencyTable | None) -> Standalone:
    """The table's protocol where it was built standalone, else the default: the other formats are timed so."""
    stored = table.meta.get("protocol") if table is not None else None
    protocol = protocol_from_dict(stored, "table meta.protocol") if stored is not None else None
    return protocol if isinstance(protocol, Standalone) else Standalone()


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
