"""What an export produced, as plain data: the summary JSON, the model card and the metadata read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ofa.export.verify import Parity
from ofa.families.family import Arch
from ofa.lut.measure import Latency


@dataclass(frozen=True)
class Preprocessing:
    """How to feed the model: per-channel mean and std of ``(pixel - mean) / std``, the class names, the
    name of the training data (the model card's dataset), and ``resize``: the resize/crop the weights
    expect where the weights' meta records one (an imported official supernet:
    ``{"interpolation": "bilinear", "crop_pct": 0.875}``), else None.
    """

    mean: list[float] | None
    std: list[float] | None
    class_names: list[str]
    dataset: str | None = None
    resize: dict[str, Any] | None = None

    @classmethod
    def of(cls, net_meta: dict[str, Any], data: Any, num_classes: int) -> Preprocessing:
        """From the training data when given, else from the supernet file's meta; classes default to 0..n-1."""

        def pick(name: str) -> Any:
            return getattr(data, name, None) if data is not None else net_meta.get(name)

        def floats(v: Any) -> list[float] | None:
            return None if v is None else [float(t) for t in np.asarray(v, dtype=np.float64).reshape(-1)]

        names = pick("class_names") or [str(i) for i in range(num_classes)]
        recorded = net_meta.get("data") if isinstance(net_meta.get("data"), dict) else {}
        dataset = recorded.get("name") or getattr(data, "name", None)
        resize = {k: net_meta[k] for k in ("interpolation", "crop_pct") if k in net_meta} or None
        return cls(
            floats(pick("mean")),
            floats(pick("std")),
            [str(n) for n in names],
            str(dataset) if dataset else None,
            resize,
        )


@dataclass(frozen=True)
class FormatExport:
    """One more format of an export (OpenVINO, ExecuTorch), checked on its own runtime."""

    format: str
    runtime: str  # runtime and version that ran the checks
    files: list[str]  # in the model folder (and beside MODEL.onnx with --out MODEL.onnx)
    parity: Parity  # against the static PyTorch model, on the inputs the ONNX model was checked on
    top1: float | None = None  # on the test split: its predictions are those of the ONNX model, image for image
    latency: Latency | None = None  # standalone, on this runtime


@dataclass(frozen=True)
class BudgetVerdict:
    """A measured latency against the budget its subnet was searched for, and what to do about a miss.

    Over budget means more than the table's noise plus the measurement's own over it (at least
    `MIN_MARGIN_PCT`): a miss neither could have made. Where the table was built on another CPU, ``advice``
    says so and gives the command that builds one here.
    """

    target_ms: float
    measured_ms: float
    margin_pct: float  # the table's noise + the measurement's (or the floor): what counts as within budget
    table_cpu: str | None
    this_cpu: str
    advice: str = ""

    MIN_MARGIN_PCT: ClassVar[float] = 2.0

    @property
    def over_pct(self) -> float:
        return 100 * (self.measured_ms / self.target_ms - 1)

    @property
    def over_budget(self) -> bool:
        return self.over_pct > self.margin_pct

    @property
    def other_machine(self) -> bool:
        return self.table_cpu is not None and self.table_cpu != self.this_cpu

    def line(self) -> str:
        """One line for the summary, the card and the console; empty when within budget."""
        if not self.over_budget:
            return ""
        where = (
            f"; the table was built on another machine ({self.table_cpu}, this one: {self.this_cpu})"
            if self.other_machine
            else ""
        )
        return (
            f"measured {self.measured_ms:.3g} ms is {self.over_pct:.0f}% over its {self.target_ms:g} ms budget, "
            f"more than the table's and the measurement's noise (±{self.margin_pct:.1f}%){where}"
            f"{f': {self.advice}' if self.advice else ''}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "over_pct": round(self.over_pct, 2),
            "over_budget": self.over_budget,
            "other_machine": self.other_machine,
            "line": self.line(),
        }


@dataclass(frozen=True)
class ExportResult:
    """What `export_subnet` wrote and measured, built once from its steps' values; ``to_dict`` is the
    ``<name>.export.json`` summary."""

    onnx_path: Path
    subnet_path: Path
    card_path: Path
    summary_path: Path
    arch: Arch
    opset: int
    dynamic_batch: bool
    bn_batches: int
    parity: Parity
    macs: int
    params: int
    int8_path: Path | None = None
    folder: Path | None = None  # the model folder (timm/Hub layout)
    top1_fp32: float | None = None
    top1_int8: float | None = None
    int8_top1_agreement: float | None = None
    test_images: int = 0
    latency_fp32: Latency | None = None
    latency_int8: Latency | None = None
    predicted_top1: float | None = None
    predicted_latency_ms: float | None = None
    table: str | None = None
    table_dtype: str | None = None  # int8: predicted_latency_ms is the INT8 model's, beside latency_int8
    supernet_sha256: str | None = None
    finetuned_sha256: str | None = None  # the fine-tuned subnet file exported (--subnet); None: extracted here
    space_fingerprint: str = ""
    formats: list[FormatExport] = field(default_factory=list)  # OpenVINO / ExecuTorch files beside the ONNX model
    table_noise_pct: float | None = None  # how sure the table's figures are (its build's noise record)
    budget: BudgetVerdict | None = None  # the measured latency against the searched-for budget
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["arch"] = self.arch.to_dict()
        out["parity"]["ok"] = self.parity.ok
        out["budget"] = self.budget.to_dict() if self.budget is not None else None
        for key, value in out.items():
            if isinstance(value, Path):
                out[key] = str(value)
        return out
