"""Export one subnet of a supernet to ONNX with no retraining, verified end to end.

extract the static timm subnet → recalibrate its BN statistics on training images → ONNX
(TorchScript exporter) → ``onnx.checker`` full check → onnxruntime vs PyTorch parity on real and
random inputs → metadata in the file → test-split accuracy and measured latency → optional INT8
→ the static PyTorch subnet, a model card and a JSON summary next to the ``.onnx``.

Nothing is written unless every check passes: the files are built in a temporary folder beside
the output and renamed into place at the end, so a failed export never clobbers a good one.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from ofa.bn import recalibrate_bn
from ofa.errors import OFAError, SpaceError
from ofa.evaluate import resize
from ofa.io import file_sha256, write_json, write_text
from ofa.space import Arch, SearchSpace
from ofa.subnet import count_macs, count_params, save_subnet
from ofa.supernet import OFAMobileNetV3

INPUT_NAME, OUTPUT_NAME = "input", "logits"
DEFAULT_OPSET = 17
# 13: per-channel INT8 (DequantizeLinear's axis) needs it; 20: the newest the TorchScript exporter writes.
MIN_OPSET, MAX_OPSET = 13, 20
PARITY_ATOL = 1e-4
META_PREFIX = "ofa."


class ParityError(OFAError):
    """onnxruntime and PyTorch disagree on the exported model: the file is not written."""


@dataclass(frozen=True)
class Parity:
    """onnxruntime vs the static PyTorch model on the same inputs."""

    max_abs_diff: float
    top1_agreement: float  # fraction of inputs whose top-1 class is identical
    real_inputs: int
    random_inputs: int
    batch_sizes: tuple[int, ...]

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= PARITY_ATOL and self.top1_agreement == 1.0


@dataclass(frozen=True)
class Latency:
    """Measured latency of one exported model (milliseconds per batch) and how it was measured."""

    mean_ms: float
    std_ms: float
    batch: int
    threads: int
    samples: int  # timed rounds kept after trimming (search.measure protocol)
    source: str  # whose protocol and which backend


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
    space_fingerprint: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["arch"] = self.arch.to_dict()
        out["parity"]["ok"] = self.parity.ok
        for key, value in out.items():
            if isinstance(value, Path):
                out[key] = str(value)
        return out


# --------------------------------------------------------------------------- checks of the inputs
def check_arch(space: SearchSpace, arch: Any, source: str = "arch") -> Arch:
    """The arch to export, or a clear error: the supernet itself is never exported."""
    if arch is None or isinstance(arch, nn.Module):
        raise OFAError(f"{source}: no subnet arch given; the supernet itself is not exported "
                       "(pick a subnet, e.g. the arch.json written by `ofa search`)")
    if not isinstance(arch, Arch):
        raise OFAError(f"{source}: expected an Arch, got {type(arch).__name__}")
    try:
        space.validate(arch, source)
    except SpaceError as exc:
        raise SpaceError(f"{exc} (the arch does not fit the supernet's space {space.fingerprint()}: "
                         "a checkpoint of another space?)") from None
    # `ofa search` records the arch's MACs and params in its space: an arch of the same shape taken
    # from a space with other widths fits `validate` but not these counts.
    for name, count in (("macs", space.macs), ("params", space.params)):
        recorded = arch.extra.get(name)
        if isinstance(recorded, int | float) and abs(recorded - count(arch)) > 0.5:
            raise OFAError(f"{source}: {name} {recorded:g} was recorded by the search, but this arch has "
                           f"{count(arch)} {name} in the supernet's space {space.fingerprint()}: the arch was "
                           "searched for a checkpoint of another space")
    return arch


def load_arch_file(path: str | Path) -> Arch:
    """Read an arch JSON; a supernet checkpoint passed instead is named as such."""
    path = Path(path)
    if not path.is_file():
        raise OFAError(f"{path}: arch file not found")
    with path.open("rb") as fh:
        head = fh.read(4)
    if head.startswith(b"PK") or head.startswith(b"\x80"):
        raise OFAError(f"{path}: this is a PyTorch checkpoint, not an arch JSON; the supernet itself is not "
                       "exported (give the subnet's arch.json, e.g. from `ofa search`)")
    try:
        return Arch.load(path)
    except UnicodeDecodeError:
        raise OFAError(f"{path}: not an arch JSON (binary file)") from None


def check_opset(opset: int) -> int:
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise OFAError(f"opset {opset!r} is not supported: choose {MIN_OPSET}..{MAX_OPSET} (default {DEFAULT_OPSET})")
    return opset


# --------------------------------------------------------------------------- onnxruntime
class OrtModel:
    """An onnxruntime CPU session that runs any number of inputs, in chunks its batch dim accepts."""

    def __init__(self, model: onnx.ModelProto | str | Path) -> None:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: optimizer notes would clutter the command's output
        # Idle worker threads sleep instead of spinning: on a shared CPU spinning threads starve the others.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
        self.session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        spec = self.session.get_inputs()[0]
        self.input_name = spec.name
        self.batch = spec.shape[0] if isinstance(spec.shape[0], int) else None

    def __call__(self, x: np.ndarray, chunk: int = 256) -> np.ndarray:
        step = self.batch or chunk
        outputs = []
        for start in range(0, len(x), step):
            part = np.ascontiguousarray(x[start:start + step], dtype=np.float32)
            n = len(part)
            if self.batch and n < self.batch:  # a static batch: pad the tail, drop the padding's outputs
                part = np.concatenate([part, np.repeat(part[-1:], self.batch - n, axis=0)])
            outputs.append(self.session.run(None, {self.input_name: part})[0][:n])
        return np.concatenate(outputs)


def measure_latencies(models: Mapping[str, onnx.ModelProto], torch_model: nn.Module, shape: tuple[int, ...],
                      table: Any = None) -> dict[str, Latency]:
    """Time the exported models side by side with the table's backend, threads, batch and protocol.

    Without a table: onnxruntime CPU, 1 thread, the default protocol of `search.measure`. A table
    measured with a torch backend times the static PyTorch model as ``fp32`` (what it predicts) and
    the ONNX files on onnxruntime CPU under the same protocol.
    """
    from search.measure import Protocol, make_runner, time_interleaved

    meta = getattr(table, "meta", None) or {}
    backend = str(meta.get("backend", "ort-cpu"))
    threads = int(meta.get("threads", 1))
    protocol = Protocol.from_dict(meta["protocol"], "table meta.protocol") if "protocol" in meta else Protocol()
    where = f"table protocol, {backend}" if table is not None else "default protocol, ort-cpu"
    onnx_backend = backend if backend.startswith("ort") else "ort-cpu"
    runners, sources = {}, {}
    for name, model in models.items():
        key = name if backend.startswith("ort") else f"{name} (onnx)"
        runners[key] = make_runner(onnx_backend, None, shape, threads, onnx_model=model.SerializeToString())
        sources[key] = where if backend.startswith("ort") else f"table protocol, {onnx_backend}"
    if not backend.startswith("ort"):
        runners["fp32"] = make_runner(backend, torch_model, shape, threads)
        sources["fp32"] = where
    stats = time_interleaved(runners, protocol)
    return {name: Latency(float(s["mean_ms"]), float(s["std_ms"]), shape[0], threads, int(s["count"]), sources[name])
            for name, s in stats.items()}


# --------------------------------------------------------------------------- data
def _loader(dataset: Dataset, batch_size: int, shuffle: bool, seed: int) -> DataLoader:
    from ofa.data import make_loader

    return make_loader(dataset, batch_size, shuffle=shuffle, seed=seed)


def _images(loader: Iterable, resolution: int, limit: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(images at ``resolution``, labels) batches, stopping after ``limit`` images."""
    seen = 0
    for x, y in loader:
        if limit is not None and seen >= limit:
            return
        if limit is not None:
            x, y = x[:limit - seen], y[:limit - seen]
        seen += len(x)
        yield resize(x.float(), resolution), y


def _eval_split(data: Any) -> Dataset | None:
    for name in ("test", "val"):
        split = getattr(data, name, None)
        if split is not None and len(split) > 0:
            return split
    return None


# --------------------------------------------------------------------------- export steps
def to_onnx(model: nn.Module, in_channels: int, resolution: int, opset: int, batch: int | None) -> onnx.ModelProto:
    """Trace ``model`` (eval mode) with torch's TorchScript exporter; ``batch=None`` makes the batch dim dynamic.

    The TorchScript exporter writes exactly the requested opset in ~0.1 s; the dynamo exporter takes
    seconds, cannot write opsets below 18 and fails to down-convert this graph (Squeeze axes).
    """
    model.eval()
    dummy = torch.zeros(batch or 2, in_channels, resolution, resolution)
    axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if batch is None else None
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation on every call
        torch.onnx.export(model, (dummy,), buffer, dynamo=False, opset_version=opset, input_names=[INPUT_NAME],
                          output_names=[OUTPUT_NAME], dynamic_axes=axes, do_constant_folding=True)
    return onnx.load_from_string(buffer.getvalue())


def check_onnx(model: onnx.ModelProto, what: str = "exported model") -> None:
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise OFAError(f"{what} fails onnx.checker: {str(exc).strip().splitlines()[0]}") from None


@torch.no_grad()
def check_parity(model: nn.Module, runner: OrtModel, real: torch.Tensor, random: torch.Tensor) -> Parity:
    """Same inputs through PyTorch and onnxruntime: max |logit diff| and top-1 agreement.

    A dynamic-batch model is run as one batch, in batches of 3 and one input at a time, so the
    batch dimension is exercised too.
    """
    x = torch.cat([real, random]).float()
    expected = model.eval()(x).numpy()
    chunks = [runner.batch] if runner.batch else [len(x), 3, 1]
    diff, agree = 0.0, 1.0
    for chunk in chunks:
        got = runner(x.numpy(), chunk=chunk)
        diff = max(diff, float(np.abs(got - expected).max()))
        agree = min(agree, float((got.argmax(1) == expected.argmax(1)).mean()))
    sizes = {runner.batch} if runner.batch else {min(c, len(x) - i) for c in chunks for i in range(0, len(x), c)}
    return Parity(diff, agree, len(real), len(random), tuple(sorted(sizes)))


def onnx_accuracy(runner: OrtModel, loader: Iterable, resolution: int, progress: bool = False,
                  desc: str = "accuracy") -> tuple[float, np.ndarray]:
    """Top-1 (percent) of an ONNX model over a labelled loader, and its predictions."""
    correct, total, preds = 0, 0, []
    for x, y in tqdm(_images(loader, resolution), desc=desc, disable=not progress, leave=False):
        pred = runner(x.numpy()).argmax(1)
        preds.append(pred)
        correct += int((pred == y.numpy()).sum())
        total += len(y)
    return 100.0 * correct / max(total, 1), np.concatenate(preds) if preds else np.zeros(0, np.int64)


def build_metadata(space: SearchSpace, arch: Arch, *, mean: Any, std: Any, class_names: Any,
                   values: Mapping[str, Any]) -> dict[str, str]:
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
    kept = [p for p in model.metadata_props if p.key not in props]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in props.items():
        model.metadata_props.add(key=key, value=value)
    model.producer_name = "ofa"
    model.doc_string = "Once-for-all subnet exported by `ofa export`; see metadata_props ofa.*"
    return model


def read_metadata(model: onnx.ModelProto | str | Path) -> dict[str, Any]:
    """The ``ofa.*`` metadata of an exported model, decoded (``arch`` is an `Arch`)."""
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
            out[prop.key[len(META_PREFIX):]] = json.loads(prop.value)
    if "arch" in out:
        out["arch"] = Arch.from_dict(out["arch"], "metadata_props ofa.arch")
    return out


def _preprocess(net: OFAMobileNetV3) -> dict[str, Any] | None:
    """Resize/crop the weights expect, where the supernet records them (imported official ones do)."""
    meta = getattr(net, "meta", {}) or {}
    found = {k: meta[k] for k in ("interpolation", "crop_pct") if k in meta}
    return found or None


def _meta_defaults(net: OFAMobileNetV3, data: Any) -> tuple[list[float] | None, list[float] | None, list[str]]:
    meta = getattr(net, "meta", {}) or {}
    mean = getattr(data, "mean", None) if data is not None else meta.get("mean")
    std = getattr(data, "std", None) if data is not None else meta.get("std")
    names = getattr(data, "class_names", None) if data is not None else meta.get("class_names")
    if not names:
        names = [str(i) for i in range(net.space.num_classes)]

    def floats(v: Any) -> list[float] | None:
        return None if v is None else [float(t) for t in np.asarray(v, dtype=np.float64).reshape(-1)]

    return floats(mean), floats(std), [str(n) for n in names]


# --------------------------------------------------------------------------- the whole export
def export_subnet(net: OFAMobileNetV3, arch: Arch, out_path: str | Path, *, data: Any = None,
                  calib_batches: int = 20, batch_size: int = 64, int8: bool = False, dynamic_batch: bool = False,
                  opset: int = DEFAULT_OPSET, checkpoint: str | Path | None = None, table: Any = None,
                  parity_images: int = 64, parity_random: int = 16, latency: bool = True, seed: int = 0,
                  progress: bool = False, arch_source: str = "arch") -> ExportResult:
    """Export subnet ``arch`` of ``net`` to ``out_path`` (.onnx) and verify it; see the module docstring.

    ``data`` is a `ofa.data.DataBundle`: its train split recalibrates BN (``calib_batches`` batches
    of ``batch_size``) and calibrates INT8; its test split gives the real parity inputs and the
    accuracy. Without it BN statistics stay the supernet's and only random inputs are checked.
    ``table`` is a `search.latency.LatencyTable`: latency is measured with its backend, threads,
    batch and protocol and reported beside its prediction; a fixed-batch model takes its batch size.
    Raises `ParityError` (and writes nothing) when onnxruntime and PyTorch disagree.
    """
    out = Path(out_path)
    if out.suffix != ".onnx":
        raise OFAError(f"{out}: the output file must end with .onnx")
    space = net.space
    arch = check_arch(space, arch, arch_source)
    check_opset(opset)
    if calib_batches < 0 or batch_size < 1:
        raise OFAError(f"calib_batches must be >= 0 and batch_size >= 1, got {calib_batches} and {batch_size}")
    if int8 and (data is None or calib_batches == 0):
        raise OFAError("INT8 needs training images for calibration: give data and calib_batches > 0")
    if table is not None:
        _check_table(table, space, arch)
    table_batch = int((getattr(table, "meta", None) or {}).get("batch", 1))
    mean, std, class_names = _meta_defaults(net, data)
    eval_split = _eval_split(data) if data is not None else None

    # 1. the static subnet, BN recalibrated; 2. ONNX, checked; 3. parity, else nothing is written.
    model = net.extract(arch).eval()
    bn_batches = 0
    if data is not None and calib_batches > 0:
        calib = _loader(data.train, batch_size, shuffle=True, seed=seed)
        bn_batches = recalibrate_bn(model, calib, calib_batches, resolution=arch.resolution)
        model.eval()
    proto = to_onnx(model, space.in_channels, arch.resolution, opset, None if dynamic_batch else table_batch)
    check_onnx(proto)
    runner = OrtModel(proto)
    real = torch.zeros(0, space.in_channels, arch.resolution, arch.resolution)
    if eval_split is not None and parity_images > 0:
        real = torch.cat([x for x, _ in _images(_loader(eval_split, batch_size, False, seed), arch.resolution,
                                                parity_images)])
    noise = torch.randn(parity_random, space.in_channels, arch.resolution, arch.resolution,
                        generator=torch.Generator().manual_seed(seed))
    parity = check_parity(model, runner, real, noise)
    if not parity.ok:
        raise ParityError(
            f"{out}: onnxruntime does not match PyTorch: max |logit diff| {parity.max_abs_diff:.3g} "
            f"(allowed {PARITY_ATOL:g}), top-1 identical on {100 * parity.top1_agreement:.1f}% of "
            f"{parity.real_inputs + parity.random_inputs} inputs; nothing written")

    result = ExportResult(
        onnx_path=out, subnet_path=out.with_suffix(".pt"), card_path=out.with_suffix(".md"),
        summary_path=out.with_suffix(".export.json"), arch=arch, opset=opset, dynamic_batch=dynamic_batch,
        bn_batches=bn_batches, parity=parity, macs=count_macs(model, arch.resolution, space.in_channels),
        params=count_params(model), predicted_top1=_float(arch.extra.get("predicted_top1")),
        supernet_sha256=file_sha256(checkpoint) if checkpoint else None, space_fingerprint=space.fingerprint(),
        predicted_latency_ms=_float(arch.extra.get("latency_ms")), table=arch.extra.get("lut"),
    )
    if table is not None:
        result.predicted_latency_ms = float(table.predict(arch))
        result.table = str(getattr(table, "source", None) or result.table or "")

    # 4. accuracy on the test split; 5. INT8; 6. latency of both, side by side.
    fp32_preds = None
    if eval_split is not None:
        result.top1_fp32, fp32_preds = onnx_accuracy(runner, _loader(eval_split, batch_size, False, seed),
                                                     arch.resolution, progress, "fp32 accuracy")
        result.test_images = len(fp32_preds)
    int8_proto, calibration_images = None, 0
    if int8:
        from ofa.quantize import quantize_int8

        calibration = _calibration_batches(data.train, runner.batch or batch_size, calib_batches * batch_size,
                                           arch.resolution, seed)
        calibration_images = sum(len(b) for b in calibration)
        int8_proto = quantize_int8(proto, calibration)
        check_onnx(int8_proto, "INT8 model")
        result.int8_path = out.with_suffix(".int8.onnx")
        if eval_split is not None:
            result.top1_int8, int8_preds = onnx_accuracy(OrtModel(int8_proto), _loader(eval_split, batch_size, False,
                                                         seed), arch.resolution, progress, "int8 accuracy")
            result.int8_top1_agreement = float((int8_preds == fp32_preds).mean())
    if latency:
        models = {"fp32": proto, **({"int8": int8_proto} if int8_proto is not None else {})}
        shape = (table_batch, space.in_channels, arch.resolution, arch.resolution)
        measured = measure_latencies(models, model, shape, table)
        result.latency_fp32, result.latency_int8 = measured["fp32"], measured.get("int8")
        result.extra["latency"] = {name: asdict(lat) for name, lat in measured.items()}

    # 7. metadata into the models, then every file at once.
    values = {
        "supernet_sha256": result.supernet_sha256, "predicted_top1": result.predicted_top1,
        "predicted_latency_ms": result.predicted_latency_ms, "latency_table": result.table,
        "macs": result.macs, "params": result.params, "bn_recalibration_batches": bn_batches,
        "top1_fp32": result.top1_fp32, "latency_ms_fp32": result.latency_fp32 and result.latency_fp32.mean_ms,
        "parity_max_abs_diff": parity.max_abs_diff, "opset": opset, "preprocess": _preprocess(net),
    }
    set_metadata(proto, build_metadata(space, arch, mean=mean, std=std, class_names=class_names,
                                       values={**values, "precision": "fp32"}))
    if int8_proto is not None:
        set_metadata(int8_proto, build_metadata(space, arch, mean=mean, std=std, class_names=class_names, values={
            **values, "precision": "int8 (QDQ, static, uint8 activations, per-channel int8 weights)",
            "top1_int8": result.top1_int8, "latency_ms_int8": result.latency_int8 and result.latency_int8.mean_ms,
            "int8_calibration_images": calibration_images}))
    subnet_meta = {"mean": mean, "std": std, "class_names": class_names, "supernet_sha256": result.supernet_sha256,
                   "bn_recalibration_batches": bn_batches, "top1": result.top1_fp32,
                   "space_fingerprint": space.fingerprint()}
    _write_all(result, proto, int8_proto, model, space, subnet_meta, mean, std, class_names)
    return result


def _check_table(table: Any, space: SearchSpace, arch: Arch) -> None:
    """The table must be measured for the supernet's space (its resolutions may be a subset) at the arch's."""
    measured = getattr(table, "table_space", None) or table.space
    source = getattr(table, "source", "latency table")
    if {**measured.to_dict(), "resolutions": None} != {**space.to_dict(), "resolutions": None}:
        raise OFAError(f"{source}: table was measured for space {measured.fingerprint()}, but the supernet's space "
                       f"is {space.fingerprint()}")
    if arch.resolution not in measured.resolutions:
        raise OFAError(f"{source}: table has no entries at resolution {arch.resolution} "
                       f"(it covers {list(measured.resolutions)})")


def _calibration_batches(train: Dataset, batch: int, images: int, resolution: int, seed: int) -> list[np.ndarray]:
    """Training images for INT8 calibration, shaped into batches the model's input accepts."""
    xs = [x for x, _ in _images(_loader(train, 256, True, seed), resolution, images)]
    if not xs:
        raise OFAError("INT8 calibration: the training split is empty")
    stacked = torch.cat(xs).numpy()
    return [stacked[i:i + batch] for i in range(0, len(stacked) - batch + 1, batch)] or [stacked]


def _write_all(result: ExportResult, proto: onnx.ModelProto, int8_proto: onnx.ModelProto | None, model: nn.Module,
               space: SearchSpace, subnet_meta: dict[str, Any], mean: Any, std: Any, class_names: list[str]) -> None:
    """Write every file into a temp folder beside the output, then rename them all into place."""
    from ofa.model_card import render_model_card

    out = result.onnx_path
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.stem}.", dir=out.parent) as tmp:
        staged: list[tuple[Path, Path]] = []

        def stage(target: Path) -> Path:
            staged.append((Path(tmp) / target.name, target))
            return staged[-1][0]

        onnx.save(proto, stage(result.onnx_path))
        if int8_proto is not None and result.int8_path is not None:
            onnx.save(int8_proto, stage(result.int8_path))
        save_subnet(model, space, result.arch, stage(result.subnet_path), meta=subnet_meta)
        write_text(stage(result.card_path), render_model_card(result, space, mean=mean, std=std,
                                                              class_names=class_names))
        write_json(stage(result.summary_path), result.to_dict())
        for src, dst in staged:
            os.replace(src, dst)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
