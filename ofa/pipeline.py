"""The main job: train → latency table → predictor → search → export, each stage resumable.

Every stage is the very ``ofa`` verb a user would run by hand, so the pipeline adds only what
chaining needs: where each output goes, whether it is already there and still matches its
inputs (recorded in ``OUT/pipeline.json`` as digests), and the closing summary.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ofa.errors import OFAError
from ofa.io import file_sha256, read_json, read_yaml, write_json, write_text

SHIPPED_TABLES = Path(__file__).resolve().parent.parent / "latency_tables"
TARGET_FRACTIONS = (0.1, 0.35, 0.65, 1.0)  # of the way from the smallest to the largest subnet's latency


@dataclass
class PipelineConfig:
    recipe: Path
    out: Path
    overrides: list[str] = field(default_factory=list)
    targets_ms: list[float] | None = None
    subnets: int = 100
    calib_batches: int = 8
    lut: Path | None = None
    int8: bool = False
    seed: int = 0


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


class Pipeline:
    """Runs the stages in order; ``log`` receives one line per stage (ran, skipped, where)."""

    def __init__(self, cfg: PipelineConfig, run_verb: Callable[[list[str]], int] | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.cfg, self.out, self.log = cfg, cfg.out, log
        self._run_verb = run_verb or _cli_verb
        self.state_path = self.out / "pipeline.json"
        self.state: dict[str, Any] = read_json(self.state_path, "pipeline state") if self.state_path.is_file() else {}

    # ----------------------------------------------------------------- bookkeeping
    def verb(self, stage: str, argv: Sequence[str]) -> None:
        self.log(f"[{stage}] ofa {' '.join(map(str, argv))}")
        if self._run_verb([str(a) for a in argv]) != 0:
            raise OFAError(f"stage '{stage}' failed (see the message above); fix it and rerun the pipeline: "
                           "finished stages are kept")

    def done(self, stage: str, key: str, *outputs: Path) -> bool:
        if self.state.get(stage) == key and all(p.exists() for p in outputs):
            self.log(f"[{stage}] up to date, skipped")
            return True
        return False

    def mark(self, stage: str, key: str) -> None:
        self.state[stage] = key
        write_json(self.state_path, self.state)

    # ----------------------------------------------------------------- stages
    def run(self) -> dict[str, Any]:
        from ofa.supernet import OFAMobileNetV3

        supernet = self.train()
        space = OFAMobileNetV3.load(supernet).space
        table = self.latency_table(supernet, space)
        predictor = self.predictor(supernet)
        search_dir = self.search(supernet, predictor, table, self.targets(space, table))
        exports = self.export(supernet, table, search_dir)
        return self.summarize(exports, search_dir)

    def train(self) -> Path:
        from ofa.train import load_recipe

        recipe = yaml.safe_load(yaml.safe_dump(load_recipe(self.cfg.recipe, self.cfg.overrides).to_dict()))
        supernet = self.out / "supernet.pt"
        stored = self.out / "recipe.yaml"
        if stored.is_file() and read_yaml(stored, "resolved recipe") != recipe:
            raise OFAError(f"{self.out}: holds a run of a different recipe (see {stored}); "
                           "choose another --out or remove that folder")
        key = digest(recipe)
        if not self.done("train", key, supernet):
            argv = ["train", self.cfg.recipe, "--out", self.out]
            argv += [a for o in self.cfg.overrides for a in ("--set", o)]
            if (self.out / "checkpoints").is_dir() or supernet.exists():
                argv.append("--resume")
            self.verb("train", argv)
            self.mark("train", key)
        return supernet

    def latency_table(self, supernet: Path, space: Any) -> Path:
        if self.cfg.lut is not None:
            _load_table_for(self.cfg.lut, space)
            self.log(f"[lut] using {self.cfg.lut} (given)")
            return self.cfg.lut
        shipped = find_shipped_table(space)
        if shipped is not None:
            self.log(f"[lut] reusing shipped table {shipped} (same space, backend and CPU)")
            return shipped
        table = self.out / "latency_table.yaml"
        key = digest(space.fingerprint(), "ort-cpu", 1, 1)
        if not self.done("lut", key, table):
            self.verb("lut", ["lut", "build", "--space", supernet, "--backend", "ort-cpu", "--threads", 1,
                              "--batch", 1, "--out", table])
            self.mark("lut", key)
        return table

    def predictor(self, supernet: Path) -> Path:
        acc, predictor = self.out / "acc.jsonl", self.out / "predictor.pt"
        key = digest(file_sha256(supernet), self.cfg.subnets, self.cfg.calib_batches, self.cfg.seed)
        if not self.done("collect", key, acc):
            self.verb("collect", ["predictor", "collect", supernet, "--n", self.cfg.subnets, "--out", acc,
                                  "--calib-batches", self.cfg.calib_batches, "--seed", self.cfg.seed,
                                  "--repeat-split"])
            self.mark("collect", key)
        key = digest(file_sha256(acc), self.cfg.seed)
        if not self.done("fit", key, predictor):
            self.verb("fit", ["predictor", "fit", acc, "--out", predictor, "--seed", self.cfg.seed])
            self.mark("fit", key)
        return predictor

    def targets(self, space: Any, table: Path) -> list[float]:
        """Latency budgets spread between the smallest and the largest subnet on this table."""
        if self.cfg.targets_ms:
            return list(self.cfg.targets_ms)
        bound = _load_table_for(table, space)
        lo = min(bound.predict(bound.space.min_arch(r)) for r in bound.space.resolutions)
        hi = max(bound.predict(bound.space.max_arch(r)) for r in bound.space.resolutions)
        return [float(f"{lo + f * (hi - lo):.4g}") for f in TARGET_FRACTIONS]

    def search(self, supernet: Path, predictor: Path, table: Path, targets: list[float]) -> Path:
        folder = self.out / "search"
        key = digest(file_sha256(supernet), file_sha256(predictor), file_sha256(table), targets, self.cfg.seed)
        if not self.done("search", key, folder / "search.json"):
            self.verb("search", ["search", "--supernet", supernet, "--predictor", predictor, "--lut", table,
                                 "--latency-ms", *targets, "--out", folder, "--seed", self.cfg.seed])
            self.mark("search", key)
        return folder

    def export(self, supernet: Path, table: Path, search_dir: Path) -> list[Path]:
        summary = read_json(search_dir / "search.json", "search summary")
        folder = self.out / "export"
        inputs = (file_sha256(supernet), file_sha256(table), self.cfg.int8, self.cfg.seed)
        results = []
        for target in summary["targets"]:
            name = f"arch_{target['target_ms']:g}ms"
            arch_file = search_dir / f"{name}.json"
            onnx = folder / f"{name}.onnx"
            result = onnx.with_suffix(".export.json")
            key = digest(file_sha256(arch_file), *inputs)
            if not self.done(f"export {name}", key, onnx, result):
                argv = ["export", "--supernet", supernet, "--arch", arch_file, "--out", onnx, "--lut", table,
                        "--seed", self.cfg.seed]
                self.verb(f"export {name}", [*argv, "--int8"] if self.cfg.int8 else argv)
                self.mark(f"export {name}", key)
            results.append(result)
        return results

    def summarize(self, exports: list[Path], search_dir: Path) -> dict[str, Any]:
        rows = [summary_row(read_json(p, "export summary"), p) for p in exports]
        table = format_summary(rows)
        pngs = sorted(str(p.relative_to(self.out)) for p in self.out.rglob("*.png"))
        doc = {"rows": rows, "plots": pngs, "pareto": str(search_dir / "pareto.png")}
        write_json(self.out / "summary.json", doc)
        write_text(self.out / "summary.md", "# Pipeline summary\n\n" + table + "\n\nPlots: "
                   + ", ".join(pngs) + "\n")
        self.log("\n" + table)
        self.log(f"\nplots: {', '.join(pngs)}\nsummary: {self.out / 'summary.md'}")
        return doc


def summary_row(result: dict[str, Any], source: Path) -> dict[str, Any]:
    """One line of the closing table from an ``<name>.export.json`` written by ``ofa export``."""
    from ofa.space import Arch

    arch = Arch.from_dict(result["arch"], str(source))
    latency = result.get("latency_fp32") or {}
    return {
        "target_ms": arch.extra.get("target_ms"),
        "arch": arch.short(),
        "predicted_top1": result.get("predicted_top1"),
        "test_top1": result.get("top1_fp32"),
        "predicted_ms": result.get("predicted_latency_ms"),
        "measured_ms": latency.get("mean_ms"),
        "macs": result.get("macs"),
        "params": result.get("params"),
        "onnx": result.get("onnx_path"),
        "int8_top1": result.get("top1_int8"),
    }


def format_summary(rows: list[dict[str, Any]]) -> str:
    """Markdown table; it reads well on a terminal too."""
    def num(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    head = ["target ms", "arch", "pred top1 %", "test top1 %", "pred ms", "measured ms", "MMACs", "params (k)",
            "ONNX"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        cells = [num(r["target_ms"], "g"), r["arch"], num(r["predicted_top1"], ".2f"), num(r["test_top1"], ".2f"),
                 num(r["predicted_ms"], ".3f"), num(r["measured_ms"], ".3f"),
                 num(None if r["macs"] is None else r["macs"] / 1e6, ".2f"),
                 num(None if r["params"] is None else r["params"] / 1e3, ".1f"), str(r["onnx"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def find_shipped_table(space: Any, folder: Path = SHIPPED_TABLES) -> Path | None:
    """A shipped ort-cpu, 1-thread, batch-1 table measured on this CPU that covers ``space``."""
    from search.measure import runtime_info

    cpu = runtime_info("ort-cpu").get("cpu")
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            table = _load_table_for(path, space)
        except OFAError:
            continue
        meta = table.meta
        if (meta.get("backend"), int(meta.get("threads", 0)), int(meta.get("batch", 0))) == ("ort-cpu", 1, 1) \
                and meta.get("cpu") == cpu:
            return path
    return None


def _load_table_for(path: Path, space: Any) -> Any:
    from search.latency import LatencyTable

    return LatencyTable.load(path).for_space(space)


def _cli_verb(argv: list[str]) -> int:
    from ofa.cli import main

    return main(argv)
