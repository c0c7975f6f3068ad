"""The main job: train → latency table → predictor → search → export, each stage resumable.

Every stage is one typed library call on what the pipeline already holds in memory (the recipe, the
supernet and its data, the table, the predictor), so the pipeline adds only what chaining needs: where
each output goes, whether it is already there and still matches its inputs (digests recorded in
``OUT/pipeline.json``), the closing summary, and under ``torchrun`` which rank does what: every rank
trains and measures its share of the predictor's subnets; rank 0 alone builds the table, fits, searches
and exports, while the others wait.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch.distributed as dist

from ofa.data.datasets import DataBundle, data_from_meta
from ofa.export.export import ExportConfig, export_subnet
from ofa.export.int8_accuracy import int8_top1
from ofa.families.family import Space, Supernet
from ofa.families.registry import load_arch, load_supernet
from ofa.lut.build import TableBuildConfig, build_table
from ofa.lut.timing import Standalone
from ofa.pipeline.summary import budget_notes, format_seconds, format_summary, summary_row
from ofa.runtime.runtimes import runtime_info
from ofa.train import Recipe, load_recipe
from ofa.train.distributed import DistEnv, process_group
from ofa.train.launch import train_processes
from ofa.train.recipe import PipelineSettings
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label, field_of
from ofa.utils.io import file_sha256, read_json, write_json, write_text
from ofa.utils.machine import torch_threads
from search.find import search_device
from search.latency import LatencyTable
from search.predictor.collect import CollectConfig, collect
from search.predictor.fit import FitConfig, fit_predictor_file
from search.predictor.model import AccuracyPredictor
from search.search_config import SearchConfig

TARGET_FRACTIONS = (0.1, 0.35, 0.65, 1.0)  # of the way from the smallest to the largest subnet's latency


def round_up(value: float, digits: int = 4) -> float:
    """A positive ``value`` rounded up to ``digits`` significant digits: a budget printed short that never
    falls below the subnets it was placed above (rounding to nearest once put one under the cheapest)."""
    rounded = float(f"{value:.{digits}g}")
    if rounded < value:
        step = 10.0 ** (math.floor(math.log10(rounded)) - digits + 1)
        rounded = float(f"{rounded + step:.{digits}g}")
    return rounded


T = TypeVar("T")


def _setting(name: str) -> dict[str, Any]:
    """The metadata of a field over the recipe's ``pipeline.NAME`` (None: the recipe's value): that setting's
    flag and help."""
    setting = field_of(PipelineSettings, name)
    default = "" if setting.default is None else f"; default {setting.default}"
    return {**setting.metadata, "help": f"{setting.metadata['help']} (pipeline.{name}{default})"}


def table_protocol(settings: PipelineSettings) -> Standalone:
    """How the pipeline times the table it builds, from its ``lut_*`` settings."""
    return Standalone(
        blocks=settings.lut_blocks,
        budget_s=settings.lut_budget_s,
        block_ms=settings.lut_block_ms,
        reference_every=settings.lut_reference_every,
    )


@dataclass(frozen=True)
class PipelineConfig:
    """What `ofa pipeline` runs (its options): the recipe (+ ``--set`` overrides) and flags over its
    ``pipeline:`` section.

    A field left None takes the recipe's `PipelineSettings` value; one given overrides it.
    """

    recipe: Path
    out: Path | None = field(default=None, metadata={"help": "run folder (default: runs/RECIPE_NAME)"})
    overrides: tuple[str, ...] = field(
        default=(),
        metadata={
            "flag": "--set",
            "repeat": True,
            "metavar": "KEY=VALUE",
            "help": "override a recipe value, e.g. --set schedule.seed=1 or --set pipeline.subnets=50 (repeatable)",
        },
    )
    train_processes: int | None = field(default=None, metadata=_setting("train_processes"))
    threads: int | None = field(default=None, metadata=_setting("threads"))
    targets_ms: tuple[float, ...] | None = field(default=None, metadata=_setting("targets_ms"))
    subnets: int | None = field(default=None, metadata=_setting("subnets"))
    calib_batches: int | None = field(default=None, metadata=_setting("calib_batches"))
    lut: Path | None = field(default=None, metadata=_setting("lut"))
    max_noise_pct: float | None = field(default=None, metadata=_setting("max_noise_pct"))
    lut_budget_s: float | None = field(default=None, metadata=_setting("lut_budget_s"))
    lut_block_ms: float | None = field(default=None, metadata=_setting("lut_block_ms"))
    lut_blocks: int | None = field(default=None, metadata=_setting("lut_blocks"))
    lut_reference_every: int | None = field(default=None, metadata=_setting("lut_reference_every"))
    int8: bool | None = field(default=None, metadata=_setting("int8"))
    dtype: Literal["float32", "int8"] | None = field(default=None, metadata=_setting("dtype"))
    seed: int = field(default=0, metadata={"help": "seed of subnet sampling, search and export"})

    def __post_init__(self) -> None:
        replace(PipelineSettings(), **self.given())  # the flags' values, checked before any work
        object.__setattr__(self, "recipe", Path(self.recipe))
        object.__setattr__(self, "out", Path(self.out) if self.out else Path("runs") / Path(self.recipe).stem)

    def given(self) -> dict[str, Any]:
        """The settings the flags set (over the recipe's ``pipeline:`` section)."""
        names = [f.name for f in fields(PipelineSettings)]
        values = {n: getattr(self, n) for n in names if getattr(self, n) is not None}
        return {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}

    def settings(self, recipe: Recipe) -> PipelineSettings:
        return replace(recipe.pipeline, **self.given())


@dataclass
class PipelineResult:
    """The closing summary (rank 0; empty on other ranks) and the stages that ran (not skipped)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    pareto: str = ""
    ran: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # wall seconds of each stage (skipped ones: ~0)


def digest(parts: Sequence[Any]) -> str:
    """Short stable hash of a stage's inputs (file digests, settings)."""
    return hashlib.sha256(json.dumps(list(parts), sort_keys=True, default=str).encode()).hexdigest()[:20]


class Pipeline:
    """Runs the stages in order; ``log`` receives one line per stage (ran, skipped, where)."""

    def __init__(self, cfg: PipelineConfig, log: Callable[[str], None] = print) -> None:
        self.cfg, self.log = cfg, log
        self.out = Path(cfg.out)  # PipelineConfig filled in the default
        self.state_path = self.out / "pipeline.json"
        self.state: dict[str, Any] = read_json(self.state_path, "pipeline state") if self.state_path.is_file() else {}
        self.ran: list[str] = []
        self.seconds: dict[str, float] = {}
        self.env = DistEnv.single_process()
        self.settings = replace(PipelineSettings(), **cfg.given())  # the recipe's section joins in `run`

    # ----------------------------------------------------------------- bookkeeping
    def dtype_key(self) -> list[str]:
        """The dtype in a stage's key where it is not float32 (a float32 run's keys stay those it always had)."""
        return [] if self.settings.dtype == "float32" else [self.settings.dtype]

    def stage(self, name: str, work: Callable[[], T]) -> T:
        """Run one stage, timed; its failure is reported as that stage's own one-line error."""
        start = time.perf_counter()
        try:
            return work()
        except OFAError as exc:
            raise OFAError(f"stage '{name}': {exc} (fix it and rerun the pipeline: finished stages are kept)") from None
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 1)

    def done(self, stage: str, key: str, outputs: Sequence[Path]) -> bool:
        if self.state.get(stage) == key and all(p.exists() for p in outputs):
            self.log(f"[{stage}] up to date, skipped")
            return True
        self.log(f"[{stage}] running")
        return False

    def mark(self, stage: str, key: str) -> None:
        self.ran.append(stage)
        self.state[stage] = key
        if self.env.is_main:
            write_json(self.state_path, self.state)

    # ----------------------------------------------------------------- stages
    def run(self) -> PipelineResult:
        recipe = load_recipe(self.cfg.recipe, list(self.cfg.overrides))
        self.settings = self.cfg.settings(recipe)
        with torch_threads(self.settings.threads), process_group(recipe.device, timeout=timedelta(hours=24)) as env:
            self.env = env
            supernet = self.stage("train", lambda: self.train(recipe))
            if env.distributed:
                dist.barrier()  # rank 0 writes the supernet file after the last step
            net = load_supernet(supernet)
            data = data_from_meta(net.meta)
            acc = self.stage("collect", lambda: self.collect(net, data, supernet))
            if env.distributed:
                dist.barrier()
            result = PipelineResult(ran=self.ran)
            if env.is_main:
                result = self.after_training(net, data, supernet, acc)
            if env.distributed:
                dist.barrier()  # the other ranks wait here while rank 0 finishes
            return result

    def after_training(self, net: Supernet, data: DataBundle, supernet: Path, acc: Path) -> PipelineResult:
        """Rank 0's stages: table, predictor, search, export, summary."""
        space = net.space
        table_path, table = self.stage("lut", lambda: self.latency_table(space))
        predictor, predictor_path = self.stage("fit", lambda: self.fit(acc))
        targets = self.targets(table)
        search_dir = self.stage("search", lambda: self.search(space, predictor, predictor_path, table_path, targets))
        exports = self.stage("export", lambda: self.export(net, data, supernet, (table_path, table), search_dir))
        return self.summarize(space, exports, search_dir)

    def train(self, recipe: Recipe) -> Path:
        supernet = self.out / "supernet.pt"
        start = [file_sha256(recipe.init.supernet)] if recipe.init.supernet else []  # a new start file: train again
        processes = 1 if self.env.distributed else self.settings.train_processes  # torchrun's ranks: as they are
        if processes > 1:
            start.append(processes)  # each process's share of the batch: other dropout masks, other weights
        key = digest([recipe.training_dict(), *start])
        if not self.done("train", key, [supernet]):
            resume = (self.out / "checkpoints").is_dir() or supernet.exists()
            where = field_label(PipelineSettings, "train_processes", "pipeline")
            train_processes(recipe, self.out, processes, resume=resume, where=where)
            self.mark("train", key)
        return supernet

    def collect(self, net: Supernet, data: DataBundle, supernet: Path) -> Path:
        acc = self.out / "acc.jsonl"
        settings = self.settings
        key = digest(
            [file_sha256(supernet), settings.subnets, settings.calib_batches, self.cfg.seed, *self.dtype_key()]
        )
        if not self.done("collect", key, [acc]):
            cfg = CollectConfig(
                n=settings.subnets,
                seed=self.cfg.seed,
                calib_batches=settings.calib_batches,
                repeat_split=True,
                dtype=settings.dtype,
                supernet=str(supernet),
            )
            collect(net, data, acc, cfg, self.env, int8_top1)
            self.mark("collect", key)
        return acc

    def latency_table(self, space: Space) -> tuple[Path, LatencyTable]:
        """The given table, else one built on this machine (a shipped one was measured elsewhere)."""
        settings = self.settings
        if settings.lut is not None:
            given = Path(settings.lut)
            table = LatencyTable.load(given).for_space(space)
            cpu, built_on = runtime_info("ort-cpu")["cpu"], table.meta.get("cpu")
            elsewhere = f"; built on {built_on}, not this CPU ({cpu})" if built_on != cpu else ""
            self.log(f"[lut] using {given} (given){elsewhere}")
            return given, table
        path = self.out / "latency_table.yaml"
        protocol = table_protocol(settings)
        key = digest(
            [space.fingerprint(), "ort-cpu", 1, 1, protocol.to_dict(), settings.max_noise_pct, *self.dtype_key()]
        )
        if not self.done("lut", key, [path]):
            if self.state.get("lut") not in (None, key) and path.exists():  # built with other settings: stale
                self.log(f"[lut] the table settings changed: rebuilding {path}")
                path.unlink()
            cfg = TableBuildConfig(
                out=path,
                dtype=settings.dtype,
                protocol=protocol,
                max_noise_pct=settings.max_noise_pct,
                command=f"ofa pipeline {self.cfg.recipe}",
            )
            build_table(space, cfg, warn=lambda line: self.log(f"[lut] {line}"))
            self.mark("lut", key)
        return path, LatencyTable.load(path).for_space(space)

    def fit(self, acc: Path) -> tuple[AccuracyPredictor, Path]:
        path = self.out / "predictor.pt"
        key = digest([file_sha256(acc), self.cfg.seed])
        if self.done("fit", key, [path]):
            return AccuracyPredictor.load(path), path
        result, _ = fit_predictor_file(acc, path, FitConfig(seed=self.cfg.seed))
        self.log(f"[fit] {result.report.summary()}")
        self.mark("fit", key)
        return result.predictor, path

    def targets(self, table: LatencyTable) -> list[float]:
        """Latency budgets spread between the smallest and the largest subnet on this table."""
        if self.settings.targets_ms:
            return list(self.settings.targets_ms)
        space = table.space
        lo = min(table.predict(space.min_arch(r)) for r in space.resolutions)
        hi = max(table.predict(space.max_arch(r)) for r in space.resolutions)
        return [round_up(lo + f * (hi - lo)) for f in TARGET_FRACTIONS]

    def search(
        self,
        space: Space,
        predictor: AccuracyPredictor,
        predictor_path: Path,
        table_path: Path,
        targets: list[float],
    ) -> Path:
        folder = self.out / "search"
        key = digest(  # the predictor's and the table's files carry their dtypes
            [file_sha256(predictor_path), file_sha256(table_path), space.fingerprint(), targets, self.cfg.seed]
        )
        if not self.done("search", key, [folder / "search.json"]):
            table = LatencyTable.load(table_path)
            cfg = SearchConfig(tuple(targets), seed=self.cfg.seed, dtype=self.settings.dtype)
            result, note = search_device(space, predictor, table, cfg)
            if note:
                self.log(f"[search] note: {note}")
            result.meta.update(predictor=str(predictor_path))
            result.save(folder, lut=str(table_path), space=space)
            self.mark("search", key)
        return folder

    def export(
        self, net: Supernet, data: DataBundle, supernet: Path, table: tuple[Path, LatencyTable], search_dir: Path
    ) -> list[tuple[Path, float]]:
        """Each distinct subnet the search picked, exported once (under its first budget's name): (summary, budget).

        Two budgets that pick the same subnet share its files; each keeps its own verdict (`summarize`).
        """
        summary = read_json(search_dir / "search.json", "search summary")
        table_path, bound = table
        int8 = self.settings.int8 or self.settings.dtype == "int8"  # an INT8 chain ships (and checks) INT8 models
        inputs = [file_sha256(supernet), file_sha256(table_path), int8, self.settings.calib_batches, self.cfg.seed]
        results, by_arch = [], {}
        for target in summary["targets"]:
            name = f"arch_{target['target_ms']:g}ms"
            arch_file = search_dir / f"{name}.json"
            arch = load_arch(net.space, arch_file)
            if arch.short() not in by_arch:
                onnx = self.out / "export" / f"{name}.onnx"
                by_arch[arch.short()] = result = onnx.with_suffix(".export.json")
                key = digest([file_sha256(arch_file), *inputs])
                if not self.done(f"export {name}", key, [onnx, result]):
                    cfg = ExportConfig(
                        out=onnx,
                        calib_batches=self.settings.calib_batches,  # BN recalibrated as the predictor's subnets were
                        batch_size=field_of(CollectConfig, "batch_size").default,
                        int8=int8,
                        seed=self.cfg.seed,
                        checkpoint=supernet,
                        arch_source=str(arch_file),
                    )
                    export_subnet(net, arch, cfg, data=data, table=bound)
                    self.mark(f"export {name}", key)
            results.append((by_arch[arch.short()], float(target["target_ms"])))
        return results

    def summarize(self, space: Space, exports: list[tuple[Path, float]], search_dir: Path) -> PipelineResult:
        rows = [summary_row(space, read_json(p, "export summary"), p, target) for p, target in exports]
        table = "\n".join([format_summary(rows), *(f"\n{line}" for line in budget_notes(rows))])
        pngs = sorted(str(p.relative_to(self.out)) for p in self.out.rglob("*.png"))
        result = PipelineResult(rows, pngs, str(search_dir / "pareto.png"), self.ran, dict(self.seconds))
        summary = {"rows": rows, "plots": pngs, "pareto": result.pareto, "stage_seconds": result.seconds}
        write_json(self.out / "summary.json", summary)
        seconds = format_seconds(result.seconds)
        write_text(
            self.out / "summary.md",
            f"# Pipeline summary\n\n{table}\n\n{seconds}\n\nPlots: {', '.join(pngs)}\n",
        )
        self.log("\n" + table)
        self.log(f"\n{seconds}\nplots: {', '.join(pngs)}\nsummary: {self.out / 'summary.md'}")
        return result


def run_pipeline(cfg: PipelineConfig, log: Callable[[str], None] = print) -> PipelineResult:
    """`ofa pipeline`: every stage from the recipe to verified ONNX models; a rerun continues where it stopped.

    Raises ``OFAError`` naming the failing stage (bad recipe, unreadable table, unreachable budget...).
    """
    return Pipeline(cfg, log).run()
