"""Build a latency table for this device: enumerate every layer config of a space and time it.

One resolution at a time: every distinct layer config at that resolution, the empty model (first
resolution only) and a few whole calibration subnets are loaded together and timed in the same
interleaved rounds, so the correction fitted on the subnets sees the machine in the state the layers
saw. After each resolution the table is rewritten atomically; an interrupted build resumes from the
resolutions already done and never re-measures them.
"""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ofa.errors import OFAError
from ofa.io import read_yaml
from ofa.space import Arch, SearchSpace
from search import measure
from search.latency import LatencyTable, save_table
from search.measure import LayerModules, Protocol

PROBES = 3  # drift probe subnets per resolution
# settings that must match for a build to resume an existing file
RESUME_KEYS = ("backend", "threads", "batch", "dtype", "space_fingerprint", "protocol", "calibration_subnets",
               "seed")


def calibration_archs(space: SearchSpace, resolution: int, n: int, seed: int) -> list[Arch]:
    """The smallest and largest subnet plus random ones: they span the range the correction is fitted on."""
    if n == 0:
        return []
    rng = np.random.default_rng([seed, resolution])
    archs = [space.min_arch(resolution), space.max_arch(resolution)][:n]
    while len(archs) < n:
        arch = space.sample(rng, resolutions=[resolution])
        if arch not in archs:
            archs.append(arch)
    return archs


def probe_archs(space: SearchSpace, resolution: int, n: int, seed: int, exclude: Sequence[Arch] = ()) -> list[Arch]:
    """Fixed subnets timed with the table and again by ``ofa lut check``: how much the machine drifted.

    The middle choice everywhere plus random ones; never calibration subnets, never judged by a check.
    """
    mid = [c[len(c) // 2] for c in (space.depths, space.kernels, space.expands)]
    archs = [Arch(resolution, (mid[0],) * space.num_stages, (mid[1],) * space.num_slots, (mid[2],) * space.num_slots)]
    archs = [a for a in archs if a not in exclude][:n]
    rng = np.random.default_rng([seed, resolution, 1])
    for _ in range(100 * n):
        if len(archs) >= n:
            break
        arch = space.sample(rng, resolutions=[resolution])
        if arch not in exclude and arch not in archs:
            archs.append(arch)
    return archs


def fit_correction(raw_ms: Sequence[float], measured_ms: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``measured ≈ scale * raw + offset`` (scale only when the points cannot fix a line)."""
    raw, measured = np.asarray(raw_ms, np.float64), np.asarray(measured_ms, np.float64)
    if len(raw) >= 3 and np.ptp(raw) > 1e-3 * raw.mean():
        scale, offset = np.linalg.lstsq(np.c_[raw, np.ones_like(raw)], measured, rcond=None)[0]
        return float(scale), float(offset)
    return float(measured.sum() / raw.sum()), 0.0


def build_table(space: SearchSpace, out: str | Path, *, backend: str = "ort-cpu",
                resolutions: Sequence[int] | None = None, threads: int = 1, batch: int = 1,
                protocol: Protocol | None = None, calibrate: int = 10, seed: int = 0,
                device: str | None = None, command: str = "", progress: bool = True,
                on_resolution_done: Callable[[int], None] | None = None) -> LatencyTable:
    """Measure (or resume measuring) a latency table for ``space`` and write it to ``out``."""
    measure.check_backend(backend)
    if threads < 1 or batch < 1:
        raise OFAError(f"--threads and --batch must be positive, got threads={threads}, batch={batch}")
    if calibrate == 1 or calibrate < 0:
        raise OFAError(f"--calibrate: need 0 (no correction) or at least 2 subnets per resolution, got {calibrate}")
    protocol = protocol or Protocol()
    res = tuple(sorted(set(resolutions or space.resolutions)))
    if not res or min(res) < 1:
        raise OFAError(f"--resolutions: expected positive integers, got {list(resolutions or [])}")
    space = replace(space, resolutions=res)
    out = Path(out)
    meta = _new_meta(space, backend, threads, batch, protocol, calibrate, seed, device, command)
    entries: dict[str, Any] = {}
    if out.exists():
        meta, entries = _resume(out, meta)
    todo = [r for r in res if r not in meta["resolutions_done"]]
    modules = LayerModules(space)
    for r in todo:
        _measure_resolution(space, r, modules, meta, entries, protocol, calibrate, progress)
        meta["resolutions_done"] = sorted([*meta["resolutions_done"], r])
        meta["complete"] = len(meta["resolutions_done"]) == len(res)
        save_table(out, meta, entries)
        if on_resolution_done:
            on_resolution_done(r)
    if not todo:
        save_table(out, {**meta, "complete": True}, entries)
    return LatencyTable.load(out)


def _new_meta(space: SearchSpace, backend: str, threads: int, batch: int, protocol: Protocol, calibrate: int,
              seed: int, device: str | None, command: str) -> dict[str, Any]:
    info = measure.runtime_info(backend)
    return {
        "device": device or platform.node() or "unknown",
        "cpu": info["cpu"],
        **({"gpu": info["gpu"]} if "gpu" in info else {}),
        "backend": backend,
        "runtime": info["runtime"],
        "runtime_version": info["runtime_version"],
        "onnx_opset": measure.OPSET if backend.startswith("ort") else None,
        "threads": threads,
        "batch": batch,
        "dtype": "float32",
        "protocol": protocol.to_dict(),
        "clock": measure.clock_name(protocol, "cuda" if backend.endswith("cuda") else "cpu", threads),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "seed": seed,
        "space_fingerprint": space.fingerprint(),
        "space": space.to_dict(),
        "overhead_ms": None,
        "calibration_subnets": calibrate,
        "correction": {"kind": "affine-per-resolution" if calibrate else "none",
                       "formula": "predicted = scale * (overhead_ms + sum of entries) + offset",
                       "per_resolution": {}},
        "probes": {},
        "resolutions_done": [],
        "complete": False,
    }


def _resume(out: Path, meta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = read_yaml(out, "latency table")
    if not isinstance(doc, Mapping) or not isinstance(doc.get("meta"), Mapping):
        raise OFAError(f"{out}: exists and is not a latency table; choose another --out")
    old = dict(doc["meta"])
    for key in RESUME_KEYS:
        if old.get(key) != meta[key]:
            raise OFAError(f"{out}: exists with {key}={old.get(key)!r}, this build asks {meta[key]!r}; "
                           f"delete it or choose another --out")
    old.setdefault("resolutions_done", [])
    return old, dict(doc.get("entries") or {})


def _measure_resolution(space: SearchSpace, r: int, modules: LayerModules, meta: dict[str, Any],
                        entries: dict[str, Any], protocol: Protocol, calibrate: int, progress: bool) -> None:
    backend, threads, batch = meta["backend"], meta["threads"], meta["batch"]
    layers = modules.for_resolution(r)
    runners: dict[str, measure.Runner] = {}
    for key, (spec, module) in tqdm(layers.items(), desc=f"export r={r}", disable=not progress, leave=False):
        runners[key] = measure.make_runner(backend, module, measure.input_shape(spec, batch), threads)
    archs = calibration_archs(space, r, calibrate, meta["seed"])
    probes = probe_archs(space, r, PROBES, meta["seed"], exclude=archs)
    subnets = measure.subnet_runners(space, archs, backend, batch, threads)
    probe_runners = {f"<probe>{k}": v for k, v in measure.subnet_runners(space, probes, backend, batch,
                                                                          threads).items()}
    if meta["overhead_ms"] is None and backend.startswith("ort"):
        runners["<empty>"] = measure.OrtRunner(measure.empty_onnx(batch), (batch, 1), threads,
                                               "cuda" if backend.endswith("cuda") else "cpu")
    models = {**runners, **subnets, **probe_runners}
    with tqdm(total=protocol.rounds, desc=f"time r={r} ({len(models)} models)", disable=not progress) as bar:
        stats = measure.time_interleaved(models, protocol, bar.update)
    meta.setdefault("probes", {})[r] = [{"arch": a.to_dict(), "measured_ms": round(stats[name]["mean_ms"], 6)}
                                        for a, name in zip(probes, probe_runners)]
    if meta["overhead_ms"] is None:
        meta["overhead_ms"] = round(float(stats.pop("<empty>")["mean_ms"]), 6) if "<empty>" in stats else 0.0
    overhead = meta["overhead_ms"]
    for key in layers:
        s = stats[key]
        entries[key] = {"mean_ms": round(max(0.0, s["mean_ms"] - overhead), 6), "std_ms": round(s["std_ms"], 6),
                        "count": int(s["count"])}
    if archs:
        raw = [overhead + sum(entries[layer.key]["mean_ms"] for layer in space.layers(a)) for a in archs]
        measured = [stats[name]["mean_ms"] for name in subnets]
        scale, offset = fit_correction(raw, measured)
        fitted = scale * np.asarray(raw) + offset
        meta["correction"]["per_resolution"][r] = {
            "scale": round(scale, 6), "offset": round(offset, 6),
            "fit_mape_pct": round(float(np.mean(np.abs(fitted / np.asarray(measured) - 1)) * 100), 3),
            "points": [{"arch": a.to_dict(), "raw_ms": round(x, 6), "measured_ms": round(m, 6)}
                       for a, x, m in zip(archs, raw, measured)],
        }
