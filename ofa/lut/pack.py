"""Latency tables for devices without Python: pack the models a table needs, time them there, import.

``ofa lut pack`` converts every layer model of a space (the same modules `ofa lut build` times), the
calibration subnets the per-resolution correction is fitted on, the drift probes `ofa lut check` re-times
and the empty model (per-call overhead) into one format, as files in a folder with ``manifest.yaml``
(key → file, input shape, format) and a README on timing them with the runtime's own benchmark tool.
``ofa lut import`` reads the timings (CSV: ``key,median_ms``, optional ``samples``, ``std_ms``) and builds
the table exactly as a build here would: entries net of the empty model, the affine correction per
resolution fitted on the calibration subnets. ``dtype="int8"`` (ONNX, OpenVINO) packs every model but the empty one
quantized as ``ofa lut build --dtype int8`` quantizes it.
"""

from __future__ import annotations

import csv
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from ofa.families.family import Arch, Space
from ofa.families.registry import arch_from_dict, family_of, space_from_dict
from ofa.lut.build import CALIBRATE_NEEDS, calibration_archs, correction_record, probe_archs
from ofa.lut.layer_models import EmptyModel, LayerModules, empty_onnx, input_shape
from ofa.lut.pack_readme import render_pack_readme
from ofa.lut.stats import Stats
from ofa.lut.timing import Standalone
from ofa.runtime import formats
from ofa.runtime.runtimes import check_dtype
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label
from ofa.utils.io import read_text, read_yaml, utc_timestamp, write_text, write_yaml
from search.latency import LatencyTable, save_table

MANIFEST = "manifest.yaml"
PACK_FORMAT = "ofa-lut-pack"
PROBES = 3  # drift probes per resolution, as `ofa lut build` times
CSV_REQUIRED, CSV_OPTIONAL = ("key", "median_ms"), ("samples", "std_ms")


@dataclass(frozen=True)
class PackConfig:
    """What to pack (``ofa lut pack``'s options): the format (or a backend name), resolutions, batch,
    calibration subnets, seed."""

    out: Path = field(metadata={"help": "new folder for the models, manifest.yaml and README.md"})
    format: str = field(
        default="onnx",
        metadata={
            "flag": "--backend",
            "metavar": "FORMAT",
            "help": "onnx, openvino or executorch (or a backend: ort-cpu, openvino-cpu, ...)",
        },
    )
    resolutions: tuple[int, ...] | None = field(default=None, metadata={"help": "resolutions (default: the space's)"})
    batch: int = field(default=1, metadata={"help": "batch size of the packed models"})
    dtype: Literal["float32", "int8"] = field(
        default="float32",
        metadata={
            "help": "int8 (onnx, openvino): every model but the empty one quantized as `lut build --dtype int8` does"
        },
    )
    calibrate: int = field(default=10, metadata={"help": "calibration subnets per resolution"})
    seed: int = field(default=0, metadata={"help": "seed of the calibration subnets and drift probes"})
    progress: bool = field(default=True, metadata={"flag": "--quiet", "invert": True, "help": "no progress bars"})

    def __post_init__(self) -> None:
        try:
            fmt = formats.check_format(self.format)
        except OFAError as exc:
            raise OFAError(f"{field_label(PackConfig, 'format')}: {exc}") from None
        formats.require(fmt)
        check_dtype(formats.FORMAT_BACKEND[fmt], self.dtype, field_label(PackConfig, "dtype"))
        if self.batch < 1:
            raise OFAError(f"{field_label(PackConfig, 'batch')} must be positive, got {self.batch}")
        if self.calibrate == 1 or self.calibrate < 0:
            raise OFAError(f"{field_label(PackConfig, 'calibrate')}: {CALIBRATE_NEEDS}, got {self.calibrate}")
        object.__setattr__(self, "format", fmt)
        object.__setattr__(self, "out", Path(self.out))


@dataclass(frozen=True)
class _Model:
    key: str
    module: Any
    shape: tuple[int, ...]
    kind: str  # layer, calibration, probe, empty
    resolution: int | None = None
    arch: Arch | None = None


def _models(space: Space, cfg: PackConfig) -> list[_Model]:
    """Every model a table needs, once: layers per resolution, calibration subnets and probes, the empty model."""
    modules, out, seen = LayerModules(space), [_Model("<empty>", EmptyModel(), (cfg.batch, 1), "empty")], set()
    for r in space.resolutions:
        for key, (spec, module) in modules.for_resolution(r).items():
            if key not in seen:
                seen.add(key)
                out.append(_Model(key, module, input_shape(spec, cfg.batch), "layer", r))
        calib = calibration_archs(space, r, cfg.calibrate, cfg.seed)
        shape = (cfg.batch, space.in_channels, r, r)
        probes = probe_archs(space, r, PROBES, cfg.seed, exclude=calib)
        for kind, archs in (("calibration", calib), ("probe", probes)):
            out += [_Model(f"<{kind}>{r}:{i}:{a.short()}", None, shape, kind, r, a) for i, a in enumerate(archs)]
    return out


def packed_space(space: Space, cfg: PackConfig) -> Space:
    """The space a pack covers: ``space`` at the pack's resolutions (its fingerprint is the manifest's)."""
    return replace(space, resolutions=tuple(sorted(set(cfg.resolutions or space.resolutions))))


def pack_models(space: Space, cfg: PackConfig) -> Path:
    """Write every model a table of ``space`` needs into ``cfg.out`` (a new folder); the manifest's path.

    Built in a temp folder beside ``cfg.out`` and renamed at the end: an interrupted pack leaves nothing.
    """
    if cfg.out.exists() and (not cfg.out.is_dir() or any(cfg.out.iterdir())):
        raise OFAError(f"{cfg.out}: exists and is not an empty folder; choose another --out")
    space = packed_space(space, cfg)
    models = _models(space, cfg)
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cfg.out.name}.", dir=cfg.out.parent))
    try:
        (tmp / "models").mkdir()
        entries = {}
        for i, m in enumerate(tqdm(models, desc=f"pack {cfg.format}", disable=not cfg.progress)):
            path = tmp / "models" / f"{i:05d}{formats.SUFFIX[cfg.format]}"
            entries[m.key] = _write_model(space, m, path, cfg.format, cfg.dtype)
        manifest = {
            "format": PACK_FORMAT,
            "model_format": cfg.format,
            "backend": formats.FORMAT_BACKEND[cfg.format],
            "batch": cfg.batch,
            "dtype": cfg.dtype,
            **({"int8": formats.int8_record(cfg.format)} if cfg.dtype == "int8" else {}),
            "seed": cfg.seed,
            "calibration_subnets": cfg.calibrate,
            "space_fingerprint": space.fingerprint(),
            "space": space.to_dict(),
            "date": utc_timestamp(),
            "models": entries,
        }
        write_yaml(tmp / MANIFEST, manifest)
        write_text(tmp / "README.md", render_pack_readme(cfg.format, len(entries)))
        if cfg.out.exists():
            cfg.out.rmdir()
        os.replace(tmp, cfg.out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return cfg.out / MANIFEST


def _write_model(space: Space, m: _Model, path: Path, fmt: str, dtype: str) -> dict[str, Any]:
    """Convert one model into ``path`` (in ``dtype``, the empty model in float32); its manifest entry."""
    module = m.module if m.arch is None else family_of(space).build_subnet(space, m.arch).eval()
    onnx_model = empty_onnx(m.shape[0]) if m.kind == "empty" and fmt != "executorch" else None
    dtype = "float32" if m.kind == "empty" else dtype
    formats.write(fmt, formats.convert(fmt, module, m.shape, onnx_model, dtype=dtype), path)
    entry: dict[str, Any] = {"file": f"models/{path.name}", "input_shape": list(m.shape), "format": fmt, "kind": m.kind}
    if m.resolution is not None:
        entry["resolution"] = m.resolution
    if m.arch is not None:
        entry["arch"] = m.arch.to_dict()
    return entry


# --------------------------------------------------------------------------------- import
def read_manifest(folder: str | Path) -> dict[str, Any]:
    """A pack's manifest, checked: one line for a folder that is not a pack."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise OFAError(f"{folder}: no {MANIFEST} here; not a folder written by `ofa lut pack`")
    doc = read_yaml(path, "pack manifest")
    if not isinstance(doc, Mapping) or doc.get("format") != PACK_FORMAT or not isinstance(doc.get("models"), Mapping):
        raise OFAError(f"{path}: not an `ofa lut pack` manifest (expected format: {PACK_FORMAT} and models)")
    return dict(doc)


def read_timings(path: str | Path, keys: list[str]) -> dict[str, Stats]:
    """``key,median_ms[,samples,std_ms]`` rows, one per manifest key: key → stats; one line per problem."""
    text = read_text(path, "timings CSV")
    rows = list(csv.DictReader(text.splitlines()))
    header = next(csv.reader(text.splitlines()[:1]), [])
    missing_cols = [c for c in CSV_REQUIRED if c not in header]
    extra_cols = [c for c in header if c not in CSV_REQUIRED + CSV_OPTIONAL]
    if missing_cols or extra_cols:
        problem = f"missing {', '.join(missing_cols)}" if missing_cols else f"unknown {', '.join(extra_cols)}"
        raise OFAError(f"{path}: header must be key,median_ms (optional samples, std_ms); {problem}")
    out: dict[str, Stats] = {}
    for line, row in enumerate(rows, start=2):
        key = row["key"]
        if key in out:
            raise OFAError(f"{path}:{line}: key {key} appears twice")
        try:
            ms = float(row["median_ms"])
            stats = {"mean_ms": ms, "std_ms": float(row.get("std_ms") or 0.0), "count": int(row.get("samples") or 1)}
        except ValueError:
            raise OFAError(f"{path}:{line}: median_ms, std_ms and samples must be numbers (key {key})") from None
        if not ms > 0:
            raise OFAError(f"{path}:{line}: median_ms must be positive, got {row['median_ms']} (key {key})")
        out[key] = stats
    unknown, missing = [k for k in out if k not in keys], [k for k in keys if k not in out]
    if unknown:
        raise OFAError(
            f"{path}: {len(unknown)} key(s) not in the pack's manifest: {', '.join(unknown[:3])}"
            f"{' ...' if len(unknown) > 3 else ''}"
        )
    if missing:
        raise OFAError(
            f"{path}: no timing for {len(missing)} key(s) of the pack: {', '.join(missing[:3])}"
            f"{' ...' if len(missing) > 3 else ''}"
        )
    return out


@dataclass(frozen=True)
class ImportConfig:
    """Where the table goes and what its meta records about the device and the timer (``ofa lut import``)."""

    out: Path = field(metadata={"help": "table to write"})
    device: str = field(default="unknown", metadata={"help": "device name stored in meta"})
    threads: int = field(default=1, metadata={"help": "threads the models ran with, stored in meta"})
    timer: str = "imported"  # how the figures were taken: the timings file, or the runner command
    blocks: int = 1  # repeated figures behind each median


def import_timings(folder: str | Path, timings: Mapping[str, Stats], cfg: ImportConfig) -> LatencyTable:
    """The table of a pack from its models' timings (key → stats), written to ``cfg.out``."""
    manifest = read_manifest(folder)
    space = space_from_dict(manifest["space"], f"{folder}/{MANIFEST}: space")
    models = manifest["models"]
    overhead = float(timings["<empty>"]["mean_ms"])
    entries = {
        k: {
            "mean_ms": round(max(0.0, s["mean_ms"] - overhead), 6),
            "std_ms": round(float(s["std_ms"]), 6),
            "count": int(s["count"]),
        }
        for k, s in timings.items()
        if models[k]["kind"] == "layer"
    }
    meta = _imported_meta(manifest, space, cfg, overhead)
    for r in space.resolutions:

        def subnets(kind: str, r: int = r) -> list[tuple[Arch, float]]:
            return [
                (arch_from_dict(space, m["arch"]), float(timings[k]["mean_ms"]))
                for k, m in models.items()
                if m["kind"] == kind and m.get("resolution") == r
            ]

        calib = subnets("calibration")
        if calib:
            meta["correction"]["per_resolution"][r] = correction_record(
                space, [a for a, _ in calib], entries, overhead, [ms for _, ms in calib]
            )
        meta["probes"][r] = [{"arch": a.to_dict(), "measured_ms": round(ms, 6)} for a, ms in subnets("probe")]
    save_table(cfg.out, meta, entries)
    return LatencyTable.load(cfg.out)


def import_timings_file(folder: str | Path, timings_csv: str | Path, cfg: ImportConfig) -> LatencyTable:
    """`import_timings` of a CSV collected by hand."""
    manifest = read_manifest(folder)
    timings = read_timings(timings_csv, list(manifest["models"]))
    return import_timings(folder, timings, replace(cfg, timer=f"imported from {Path(timings_csv).name}"))


def _imported_int8(record: Mapping[str, Any]) -> dict[str, Any]:
    """``meta.int8`` of an imported INT8 table: the pack's quantization, and no float ops, which the device's own
    runtime decided out of sight."""
    note = "not observed: the device's own runtime ran the models"
    return {**record, "empty_model": "float32", "float_ops": None, "float_ops_note": note}


def _imported_meta(manifest: Mapping[str, Any], space: Space, cfg: ImportConfig, overhead: float) -> dict[str, Any]:
    protocol = {**Standalone(blocks=cfg.blocks, estimator="median").to_dict(), "timer": cfg.timer}
    return {
        "device": cfg.device,
        "backend": manifest["backend"],
        "runtime": manifest["model_format"],
        "threads": cfg.threads,
        "batch": int(manifest["batch"]),
        "dtype": manifest.get("dtype", "float32"),
        **({"int8": _imported_int8(manifest["int8"])} if "int8" in manifest else {}),
        "protocol": protocol,
        "clock": "wall",
        "date": utc_timestamp(),
        "command": cfg.timer,
        "seed": manifest["seed"],
        "space_fingerprint": space.fingerprint(),
        "space": space.to_dict(),
        "overhead_ms": round(overhead, 6),
        "calibration_subnets": manifest["calibration_subnets"],
        "correction": {
            "kind": "affine-per-resolution" if manifest["calibration_subnets"] else "none",
            "formula": "predicted = scale * (overhead_ms + sum of entries) + offset",
            "per_resolution": {},
        },
        "probes": {},
        "resolutions_done": list(space.resolutions),
        "complete": True,
    }
