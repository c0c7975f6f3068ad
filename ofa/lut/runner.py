"""``ofa lut build --runner`` / ``ofa lut check --runner``: tables timed and checked by any command (a device's
benchmark tool), not in this process.

The models are packed (`ofa.lut.pack`: layers, calibration subnets, probes, the empty model), each is
timed by the command (`ofa.lut.external_runner`: shuffled blocks, median), the figures are saved as the
pack's ``timings.csv`` (what ``ofa lut import`` reads) and imported into the table with the same correction
as any build. An existing pack of the same space and format is reused, so a second build only re-times.
A check converts random subnets (never calibration subnets or probes) into the table's format and times
them with the same command: a runner-built table is judged against its own runner's whole-subnet figures.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ofa.families.family import Space
from ofa.families.registry import family_of
from ofa.lut.check import CheckResult, judged_dtype, sample_check_archs, summarize_errors
from ofa.lut.external_runner import CommandRunner, time_with_command
from ofa.lut.pack import (
    MANIFEST,
    ImportConfig,
    PackConfig,
    import_timings,
    pack_models,
    packed_space,
    read_manifest,
)
from ofa.lut.stats import Stats
from ofa.runtime import formats
from ofa.utils.errors import OFAError
from ofa.utils.io import write_json, write_text
from search.latency import LatencyTable, space_from_arg

TIMINGS = "timings.csv"


@dataclass(frozen=True)
class RunnerBuildConfig:
    """A runner-timed build: the table, the command, the pack (its folder and format), blocks per model."""

    out: Path
    runner: CommandRunner
    pack: PackConfig
    blocks: int = 3
    device: str = "unknown"
    threads: int = 1  # what the command runs with, recorded in meta

    def __post_init__(self) -> None:
        if self.blocks < 1:
            raise OFAError(f"--repeats: need at least 1 run per model, got {self.blocks}")
        object.__setattr__(self, "out", Path(self.out))


def build_with_runner(space: Space, cfg: RunnerBuildConfig) -> LatencyTable:
    """Pack (or reuse the pack), time every model with the command, write ``timings.csv``, import the table."""
    folder = cfg.pack.out
    if not (folder / MANIFEST).is_file():
        pack_models(space, cfg.pack)
    space = packed_space(space, cfg.pack)
    manifest = read_manifest(folder)
    held = (manifest["space_fingerprint"], manifest["model_format"], manifest.get("dtype", "float32"))
    if held != (space.fingerprint(), cfg.pack.format, cfg.pack.dtype):
        raise OFAError(
            f"{folder}: holds a pack of space {held[0]} in {held[1]} {held[2]}, not of {space.fingerprint()} "
            f"in {cfg.pack.format} {cfg.pack.dtype}; choose another --pack"
        )
    models = {
        key: (folder / m["file"], str(m["file"]), tuple(m["input_shape"])) for key, m in manifest["models"].items()
    }
    with tqdm(
        total=cfg.blocks * len(models), desc=f"time {len(models)} models with the runner", disable=not cfg.pack.progress
    ) as bar:
        stats = time_with_command(cfg.runner, models, cfg.blocks, cfg.pack.seed, bar.update)
    write_timings(folder / TIMINGS, stats)
    timer = f"runner: {cfg.runner.command} (regex {cfg.runner.regex})"
    return import_timings(folder, stats, ImportConfig(cfg.out, cfg.device, cfg.threads, timer, cfg.blocks))


def build_with_runner_file(space: str, cfg: RunnerBuildConfig) -> LatencyTable:
    """`build_with_runner` for a space given as ``mbv3``, a recipe/space file, a checkpoint or a table."""
    return build_with_runner(space_from_arg(space), cfg)


def write_timings(path: Path, stats: Mapping[str, Stats]) -> Path:
    """The figures as ``key,median_ms,samples,std_ms`` (what ``ofa lut import`` reads)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["key", "median_ms", "samples", "std_ms"])
    for key, s in stats.items():
        writer.writerow([key, f"{s['mean_ms']:.6f}", int(s["count"]), f"{s['std_ms']:.6f}"])
    return write_text(path, buf.getvalue())


@dataclass(frozen=True)
class RunnerCheckConfig:
    """A check through a command: the subnets (per resolution), where their models go, blocks per model."""

    runner: CommandRunner
    folder: Path  # the check's models are written here (and kept, to time them again by hand)
    n: int = 30
    resolutions: tuple[int, ...] | None = None
    blocks: int = 3
    seed: int = 0
    progress: bool = True
    dtype: str | None = None  # given, it must be the table's


def check_with_runner(table: LatencyTable, cfg: RunnerCheckConfig) -> CheckResult:
    """``cfg.n`` random subnets per resolution in the table's format, timed by the command, against predictions."""
    fmt = formats.check_format(str(table.meta["backend"]))
    dtype = judged_dtype(table, cfg.dtype)
    space, batch = table.space, int(table.meta["batch"])
    resolutions = list(cfg.resolutions or space.resolutions)
    archs = sample_check_archs(table, resolutions, cfg.n, cfg.seed)
    cfg.folder.mkdir(parents=True, exist_ok=True)
    models = {}
    for i, arch in enumerate(tqdm(archs, desc=f"convert to {fmt}", disable=not cfg.progress)):
        shape = (batch, space.in_channels, arch.resolution, arch.resolution)
        path = cfg.folder / f"{i:04d}{formats.SUFFIX[fmt]}"
        module = family_of(space).build_subnet(space, arch).eval()
        formats.write(fmt, formats.convert(fmt, module, shape, dtype=dtype), path)
        models[str(i)] = (path, path.name, shape)
    with tqdm(total=cfg.blocks * len(models), desc="time with the runner", disable=not cfg.progress) as bar:
        stats = time_with_command(cfg.runner, models, cfg.blocks, cfg.seed, bar.update)
    rows = [
        {
            "resolution": a.resolution,
            "arch": a.to_dict(),
            "predicted_ms": round(table.predict(a), 4),
            "measured_ms": round(stats[str(i)]["mean_ms"], 4),
            "std_ms": round(stats[str(i)]["std_ms"], 4),
            "error_pct": round((table.predict(a) / stats[str(i)]["mean_ms"] - 1) * 100, 3),
        }
        for i, a in enumerate(archs)
    ]

    def judge(selected: list[dict]) -> dict:
        return summarize_errors([x["predicted_ms"] for x in selected], [x["measured_ms"] for x in selected])

    summary = {
        **judge(rows),
        "per_resolution": {r: judge([x for x in rows if x["resolution"] == r]) for r in resolutions},
        "timer": f"runner: {cfg.runner.command} (regex {cfg.runner.regex}), median of {cfg.blocks} runs",
    }
    return CheckResult(rows, summary)


def check_with_runner_file(table_path: Path, cfg: RunnerCheckConfig, out: Path) -> CheckResult:
    """`check_with_runner` of a table file; writes ``summary.json`` (with every row) into ``out``."""
    result = check_with_runner(LatencyTable.load(table_path), cfg)
    write_json(out / "summary.json", {"table": str(table_path), **result.summary, "rows": result.rows})
    return result
