"""Build a latency table for this device: enumerate every layer config of a space and time it.

One resolution at a time: every distinct layer config at that resolution, the empty model (first
resolution only), a few whole calibration subnets and the drift probes are loaded together and timed
in the same shuffled blocks (`ofa.lut.timing`, standalone by default), so the correction fitted on
the subnets sees the machine in the state the layers saw. After each resolution the table is rewritten
atomically; an interrupted build resumes from the resolutions already done and never re-measures them.

Each resolution's noise is recorded in ``meta.noise`` (`NOISE_CRITERION`: how sure the figures of its
whole subnets are, probes and calibration subnets, since a wrong one would bend the correction; and
the host's burstiness beside it). A noisy machine does not stop a build: a resolution above
`WARN_NOISE_PCT` gets one warning line that says what the figure means for the table, is written, and
is marked ``noisy``, so a later run with ``remeasure_noisy`` times only those again. A strict
``max_noise_pct`` (for tables built in CI) refuses instead: the resolution is timed again, up to
``NOISE_ATTEMPTS`` times, then the build stops with one line and writes nothing for it.

``dtype="int8"`` times every model but the empty one quantized as it ships (`ofa.runtime.quantize`), and
records per resolution the op types the runtime still computed in float (``meta.int8.float_ops``).
"""

from __future__ import annotations

import itertools
import platform
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm import tqdm

from ofa.families.family import Arch, Space
from ofa.families.genes import GeneLayoutBase
from ofa.families.registry import family_of, layout_of
from ofa.lut.layer_models import LayerModules, empty_runner, input_shape, subnet_runners
from ofa.lut.protocols import Protocol, protocol_from_dict, time_models
from ofa.lut.stats import Stats, noise_pct, spread_pct
from ofa.lut.timing import NOISE_CRITERION, WARN_NOISE_PCT, Standalone
from ofa.runtime import formats
from ofa.runtime.convert import DEFAULT_OPSET
from ofa.runtime.runtimes import Runner, backend_device, check_backend, check_dtype, make_runner, runtime_info
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label
from ofa.utils.io import read_yaml, utc_timestamp
from search.latency import LatencyTable, save_table, space_from_arg

PROBES = 3  # drift probe subnets per resolution
NOISE_ATTEMPTS = 3  # timings of one resolution before the build gives up as too noisy
DRAWS_PER_SUBNET = 100  # random draws allowed per distinct subnet wanted, before giving up
# settings that must match for a build to resume an existing file
CALIBRATE_NEEDS = "need 0 (no correction) or at least 2 subnets per resolution"  # calibration subnets
RESUME_KEYS = ("backend", "threads", "batch", "dtype", "space_fingerprint", "protocol", "calibration_subnets", "seed")


@dataclass(frozen=True)
class TableBuildConfig:
    """Where and how to build a table (the options of ``ofa lut build``); checked once."""

    out: Path = field(metadata={"help": "table to write (resumed if it exists)"})
    backend: str = field(
        default="ort-cpu",
        metadata={"help": "ort-cpu, torch-cpu, ort-cuda, torch-cuda, openvino-cpu or executorch-xnnpack"},
    )
    resolutions: tuple[int, ...] | None = field(default=None, metadata={"help": "resolutions (default: the space's)"})
    threads: int = field(default=1, metadata={"help": "threads the models run with"})
    batch: int = field(default=1, metadata={"help": "batch size of the timed models"})
    dtype: Literal["float32", "int8"] = field(
        default="float32",
        metadata={
            "help": "int8: every timed model (layers, whole subnets) quantized as export does on synthetic "
            "calibration batches (ort-cpu: QDQ U8S8, per-channel weights; openvino-cpu: NNCF; "
            "executorch-xnnpack: XNNPACK's quantizer)"
        },
    )
    protocol: Protocol = field(default_factory=Standalone)
    calibrate: int = field(default=10, metadata={"help": "whole subnets per resolution for the correction (0: none)"})
    max_noise_pct: float | None = field(
        default=None,
        metadata={
            "flag": "--max-noise",
            "metavar": "PCT",
            "help": "strict (for tables built in CI): a resolution whose whole subnets' figures are less sure "
            f"than ±PCT (95% interval) is timed again, and after {NOISE_ATTEMPTS} tries the build stops without "
            f"writing it (default: warn above {WARN_NOISE_PCT:g}%, write it and mark it noisy)",
        },
    )
    remeasure_noisy: bool = field(default=False, metadata={"help": "resuming: time the resolutions marked noisy again"})
    seed: int = field(default=0, metadata={"help": "seed of the calibration subnets and drift probes"})
    device: str | None = field(default=None, metadata={"help": "device name stored in meta (default: host name)"})
    command: str = ""  # the command line, stored in meta so an unfinished build can be resumed
    progress: bool = field(default=True, metadata={"flag": "--quiet", "invert": True, "help": "no progress bars"})

    def __post_init__(self) -> None:
        check_backend(self.backend)
        label = partial(field_label, TableBuildConfig)
        check_dtype(self.backend, self.dtype, label("dtype"))
        for name in ("threads", "batch"):
            if getattr(self, name) < 1:
                raise OFAError(f"{label(name)} must be positive, got {getattr(self, name)}")
        if self.calibrate == 1 or self.calibrate < 0:
            raise OFAError(f"{label('calibrate')}: {CALIBRATE_NEEDS}, got {self.calibrate}")
        if self.max_noise_pct is not None and not self.max_noise_pct > 0:
            raise OFAError(f"{label('max_noise_pct')}: expected a positive percentage, got {self.max_noise_pct}")
        if self.resolutions and min(self.resolutions) < 1:
            raise OFAError(f"{label('resolutions')}: expected positive integers, got {list(self.resolutions)}")
        object.__setattr__(self, "out", Path(self.out))


# --------------------------------------------------------------------------------- subnets timed with the layers
def _key(layout: GeneLayoutBase, arch: Arch) -> bytes:
    """The subnet behind ``arch`` (unused slots ignored): two archs with one key are one network."""
    return layout.canonical(layout.encode(arch)).tobytes()


def _distinct(space: Space, candidates: Iterable[Arch], n: int, exclude: Sequence[Arch] = ()) -> list[Arch]:
    """The first ``n`` distinct subnets among ``candidates`` that are not in ``exclude`` (fewer if it runs out)."""
    layout = layout_of(space)
    seen = {_key(layout, a) for a in exclude}
    out: list[Arch] = []
    for arch in candidates:
        key = _key(layout, arch)
        if key not in seen:
            seen.add(key)
            out.append(arch)
            if len(out) == n:
                break
    return out


def _draws(space: Space, rng: np.random.Generator, resolution: int, n: int) -> Iterator[Arch]:
    """Random subnets at ``resolution``, at most ``DRAWS_PER_SUBNET * n`` of them: no search runs unbounded."""
    sample = family_of(space).sample_arch
    return (sample(space, rng, resolutions=[resolution]) for _ in range(DRAWS_PER_SUBNET * n))


def calibration_archs(space: Space, resolution: int, n: int, seed: int) -> list[Arch]:
    """The smallest and largest subnet plus random ones: they span the range the correction is fitted on.

    A space with at most ``n`` distinct subnets gives each of them once.
    """
    if n == 0:
        return []
    ends = [space.min_arch(resolution), space.max_arch(resolution)]
    if space.count() <= n:
        return _distinct(space, itertools.chain(ends, layout_of(space).every_arch(resolution)), n)
    rng = np.random.default_rng([seed, resolution])
    archs = _distinct(space, itertools.chain(ends[:n], _draws(space, rng, resolution, n)), n)
    if len(archs) < n:
        raise OFAError(
            f"--calibrate: found only {len(archs)} distinct subnets at {resolution} px in "
            f"{DRAWS_PER_SUBNET * n} random draws; ask for at most {len(archs)}"
        )
    return archs


def probe_archs(space: Space, resolution: int, n: int, seed: int, exclude: Sequence[Arch] = ()) -> list[Arch]:
    """Fixed subnets timed with the table and again by ``ofa lut check``: how much the machine drifted.

    The middle choice everywhere plus random ones; never calibration subnets, never judged by a check.
    Fewer than ``n`` where the space has no other subnets left.
    """
    layout = layout_of(space)
    middle = layout.sizes // 2
    middle[layout.resolution] = space.resolutions.index(resolution)
    rng = np.random.default_rng([seed, resolution, 1])
    candidates = itertools.chain([layout.decode(middle)], _draws(space, rng, resolution, n))
    return _distinct(space, candidates, n, exclude)


def fit_correction(raw_ms: Sequence[float], measured_ms: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``measured ≈ scale * raw + offset`` (scale only when the points cannot fix a line)."""
    raw, measured = np.asarray(raw_ms, np.float64), np.asarray(measured_ms, np.float64)
    if len(raw) >= 3 and np.ptp(raw) > 1e-3 * raw.mean():
        scale, offset = np.linalg.lstsq(np.c_[raw, np.ones_like(raw)], measured, rcond=None)[0]
        return float(scale), float(offset)
    return float(measured.sum() / raw.sum()), 0.0


# --------------------------------------------------------------------------------- the build
def build_table(
    space: Space,
    cfg: TableBuildConfig,
    on_resolution_done: Callable[[int], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> LatencyTable:
    """Measure (or resume measuring) a latency table for ``space`` and write it to ``cfg.out``.

    ``on_resolution_done(r)`` runs after each resolution is saved; ``warn`` receives the one-line warning
    of a noisy resolution (default: standard error). Raises `OFAError` when ``cfg.out`` holds another
    file or a table built with other settings, or (strict ``max_noise_pct``) for a resolution too noisy.
    """
    res = tuple(sorted(set(cfg.resolutions or space.resolutions)))
    space = replace(space, resolutions=res)
    meta = _new_meta(space, cfg)
    entries: dict[str, Any] = {}
    if cfg.out.exists():
        meta, entries = _resume(cfg.out, meta)
    if cfg.remeasure_noisy:
        meta["resolutions_done"] = [r for r in meta["resolutions_done"] if r not in noisy_resolutions(meta)]
    todo = [r for r in res if r not in meta["resolutions_done"]]
    modules = LayerModules(space)
    for r in todo:
        _measure_resolution(space, r, modules, meta, entries, cfg)
        _warn_if_noisy(meta, r, cfg, warn or (lambda line: print(line, file=sys.stderr)))
        meta["resolutions_done"] = sorted([*meta["resolutions_done"], r])
        meta["complete"] = len(meta["resolutions_done"]) == len(res)
        save_table(cfg.out, meta, entries)
        if on_resolution_done:
            on_resolution_done(r)
    if not todo:
        save_table(cfg.out, {**meta, "complete": True}, entries)
    return LatencyTable.load(cfg.out)


def build_table_file(space: str, cfg: TableBuildConfig) -> LatencyTable:
    """`build_table` for a space given as ``mbv3``, a recipe/space file, a checkpoint or a table."""
    return build_table(space_from_arg(space), cfg)


def _new_meta(space: Space, cfg: TableBuildConfig) -> dict[str, Any]:
    info, int8 = runtime_info(cfg.backend), cfg.dtype == "int8"
    return {
        "device": cfg.device or platform.node() or "unknown",
        "cpu": info["cpu"],
        **({"gpu": info["gpu"]} if "gpu" in info else {}),
        "backend": cfg.backend,
        "runtime": info["runtime"],
        "runtime_version": info["runtime_version"],
        "onnx_opset": DEFAULT_OPSET if cfg.backend.startswith(("ort", "openvino")) else None,
        "threads": cfg.threads,
        "batch": cfg.batch,
        "dtype": cfg.dtype,
        # float_ops: per resolution, each op type the runtime computed in float (its fallbacks, timed as they
        # are), with the number of timed models that have one
        **({"int8": {**formats.int8_record(cfg.backend), "empty_model": "float32", "float_ops": {}}} if int8 else {}),
        "protocol": cfg.protocol.to_dict(),
        "clock": cfg.protocol.clock_name(backend_device(cfg.backend), cfg.threads),
        "date": utc_timestamp(),
        "command": cfg.command,
        "seed": cfg.seed,
        "space_fingerprint": space.fingerprint(),
        "space": space.to_dict(),
        "overhead_ms": None,
        "calibration_subnets": cfg.calibrate,
        "correction": {
            "kind": "affine-per-resolution" if cfg.calibrate else "none",
            "formula": "predicted = scale * (overhead_ms + sum of entries) + offset",
            "per_resolution": {},
        },
        "probes": {},
        "noise": {"criterion": NOISE_CRITERION, "per_resolution": {}},
        "resolutions_done": [],
        "complete": False,
    }


def _resume(out: Path, meta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = read_yaml(out, "latency table")
    if not isinstance(doc, Mapping) or not isinstance(doc.get("meta"), Mapping):
        raise OFAError(f"{out}: exists and is not a latency table; choose another --out")
    old = {"dtype": "float32", **doc["meta"]}  # tables from before INT8 name no dtype
    as_read = {"protocol": protocol_from_dict(old.get("protocol", {}), f"{out}: meta.protocol").to_dict()}
    options = {f.name for f in fields(TableBuildConfig) if "help" in f.metadata}
    for key in RESUME_KEYS:  # a protocol as read: a field it leaves out is its default
        if (stored := as_read.get(key, old.get(key))) != meta[key]:
            flag = f" ({field_label(TableBuildConfig, key)})" if key in options else ""
            raise OFAError(f"{out}: exists with {key}={stored!r}, this build asks {meta[key]!r}{flag}; "
                           f"delete it or choose another --out")  # fmt: skip
    old.setdefault("resolutions_done", [])
    return old, dict(doc.get("entries") or {})


def _layer_runners(modules: LayerModules, r: int, cfg: TableBuildConfig) -> dict[str, Runner]:
    runners: dict[str, Runner] = {}
    layers = modules.for_resolution(r)
    for key, (spec, module) in tqdm(layers.items(), desc=f"export r={r}", disable=not cfg.progress, leave=False):
        runners[key] = make_runner(cfg.backend, module, input_shape(spec, cfg.batch), cfg.threads, dtype=cfg.dtype)
    return runners


def _measure_resolution(
    space: Space,
    r: int,
    modules: LayerModules,
    meta: dict[str, Any],
    entries: dict[str, Any],
    cfg: TableBuildConfig,
) -> None:
    """Time every layer at ``r`` with the calibration and probe subnets; fill ``entries`` and ``meta``."""
    layers = _layer_runners(modules, r, cfg)
    archs = calibration_archs(space, r, cfg.calibrate, meta["seed"])
    probes = probe_archs(space, r, PROBES, meta["seed"], exclude=archs)
    subnets = subnet_runners(space, archs, cfg.backend, cfg.batch, cfg.threads, cfg.dtype)
    probes_by_key = subnet_runners(space, probes, cfg.backend, cfg.batch, cfg.threads, cfg.dtype)
    probe_runners = {f"<probe>{k}": v for k, v in probes_by_key.items()}
    extra = {}
    if meta["overhead_ms"] is None and not cfg.backend.startswith("torch"):
        extra["<empty>"] = empty_runner(cfg.backend, cfg.batch, cfg.threads)
    models = {**layers, **extra, **subnets, **probe_runners}
    if "int8" in meta:
        meta["int8"]["float_ops"][r] = dict(sorted(Counter(op for m in models.values() for op in m.float_ops).items()))
    stats = _time_quietly(models, [*probe_runners, *subnets] or list(models), r, meta, cfg)
    meta.setdefault("probes", {})[r] = [
        {"arch": a.to_dict(), "measured_ms": round(stats[name]["mean_ms"], 6)} for a, name in zip(probes, probe_runners)
    ]
    if meta["overhead_ms"] is None:
        meta["overhead_ms"] = round(float(stats.pop("<empty>")["mean_ms"]), 6) if "<empty>" in stats else 0.0
    overhead = meta["overhead_ms"]
    for key in layers:
        s = stats[key]
        entries[key] = {
            "mean_ms": round(max(0.0, s["mean_ms"] - overhead), 6),
            "std_ms": round(s["std_ms"], 6),
            "count": int(s["count"]),
        }
    if archs:
        measured = [stats[name]["mean_ms"] for name in subnets]
        meta["correction"]["per_resolution"][r] = correction_record(space, archs, entries, overhead, measured)


def _time_quietly(
    models: Mapping[str, Runner], judged: Sequence[str], r: int, meta: dict[str, Any], cfg: TableBuildConfig
) -> dict[str, Stats]:
    """Time ``models``; record how noisy the ``judged`` ones (whole subnets) were in meta.

    Strict (``cfg.max_noise_pct``): timed again while too noisy, then `OFAError` (one line, nothing written
    for ``r``) after `NOISE_ATTEMPTS` timings. Otherwise one timing, whatever its noise.
    """
    noise: list[float] = []
    attempts = NOISE_ATTEMPTS if cfg.max_noise_pct is not None else 1
    for attempt in range(1, attempts + 1):
        desc = f"time r={r} ({len(models)} models{f', attempt {attempt}' if attempt > 1 else ''})"
        with tqdm(total=cfg.protocol.progress_total(len(models)), desc=desc, disable=not cfg.progress) as bar:
            stats = time_models(models, cfg.protocol, bar.update)
        noise.append(round(noise_pct(stats, judged), 3))
        if cfg.max_noise_pct is None or noise[-1] <= cfg.max_noise_pct:
            record = meta.setdefault("noise", {"criterion": NOISE_CRITERION, "per_resolution": {}})
            record["per_resolution"][r] = {
                "noise_pct": noise[-1],
                "spread_pct": round(spread_pct(stats, judged), 3),
                "steal_blocks": int(sum(stats[n].get("steal_blocks", 0) for n in models)),
                "max_pct": cfg.max_noise_pct,
                "noisy": noise[-1] > (cfg.max_noise_pct or WARN_NOISE_PCT),
                "attempts": attempt,
                "date": utc_timestamp(),  # when this resolution was timed: `--remeasure-noisy` times some again later
            }
            return stats
    kept = meta["resolutions_done"]
    raise OFAError(
        f"{cfg.out}: too noisy to measure at {r} px: whole subnets' latency figures were sure to only "
        f"{', '.join(f'±{n:.1f}%' for n in noise)} (95% interval) in {attempts} attempts, more than "
        f"--max-noise {cfg.max_noise_pct:g}%; nothing written for {r} px"
        f"{f' (resolutions {kept} kept; rerun to resume)' if kept else ''}"
    )


def noisy_resolutions(meta: Mapping[str, Any]) -> list[int]:
    """The resolutions a table's meta records as noisy (above the warning level or its strict limit)."""
    per = ((meta.get("noise") or {}).get("per_resolution")) or {}
    return sorted(int(r) for r, rec in per.items() if isinstance(rec, Mapping) and rec.get("noisy"))


def noise_text(rec: Mapping[str, Any]) -> str:
    """One resolution's noise record as a phrase: how sure, how bursty, and the verdict."""
    limit = f"limit {rec['max_pct']:g}%" if rec.get("max_pct") is not None else f"warning above {WARN_NOISE_PCT:g}%"
    spread = f", blocks spread {rec['spread_pct']:.1f}%" if "spread_pct" in rec else ""
    return f"noise ±{rec['noise_pct']:.2f}%{spread} ({limit}{', NOISY' if rec.get('noisy') else ''})"


def _warn_if_noisy(meta: Mapping[str, Any], r: int, cfg: TableBuildConfig, warn: Callable[[str], None]) -> None:
    rec = meta["noise"]["per_resolution"][r]
    if rec["noisy"]:
        warn(
            f"{cfg.out}: warning: {r} px measured to ±{rec['noise_pct']:.1f}% only (95% interval of whole "
            f"subnets' figures; their blocks spread {rec['spread_pct']:.0f}%: a busy host), so its predictions "
            f"may be off by about that much; written and marked noisy: `--remeasure-noisy` times it again, "
            f"`--max-noise` refuses instead"
        )


def correction_record(
    space: Space, archs: Sequence[Arch], entries: Mapping[str, Any], overhead: float, measured: Sequence[float]
) -> dict[str, Any]:
    """The affine fit of the calibration subnets' measured ms on their raw sums, as stored in meta."""
    raw = [overhead + sum(entries[layer.key]["mean_ms"] for layer in space.layers(a)) for a in archs]
    scale, offset = fit_correction(raw, measured)
    fitted = scale * np.asarray(raw) + offset
    return {
        "scale": round(scale, 6),
        "offset": round(offset, 6),
        "fit_mape_pct": round(float(np.mean(np.abs(fitted / np.asarray(measured) - 1)) * 100), 3),
        "points": [
            {"arch": a.to_dict(), "raw_ms": round(x, 6), "measured_ms": round(m, 6)}
            for a, x, m in zip(archs, raw, measured)
        ],
    }
