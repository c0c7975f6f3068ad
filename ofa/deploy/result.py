"""What an export produced, as plain data: the summary JSON, the model card and the metadata read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ofa.arch import Arch
from ofa.deploy.timing import Latency
from ofa.deploy.verify import Parity


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


@dataclass
class ExportResult:
    """What `export_subnet` wrote and measured; ``to_dict`` is the ``<name>.export.json`` summary."""

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
    supernet_sha256: str | None = None
    finetuned_sha256: str | None = None  # the fine-tuned subnet file exported (--subnet); None: extracted here
    space_fingerprint: str = ""
    formats: list[FormatExport] = field(default_factory=list)  # OpenVINO / ExecuTorch files beside the ONNX model
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["arch"] = self.arch.to_dict()
        out["parity"]["ok"] = self.parity.ok
        for key, value in out.items():
            if isinstance(value, Path):
                out[key] = str(value)
        return out
