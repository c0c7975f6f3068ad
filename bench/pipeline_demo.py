"""The demo's figures from one command: `ofa pipeline recipes/digits.yaml` into a fresh folder, timed.

Reports the wall time of training and of the whole pipeline, the test top-1 of the largest and the
smallest subnet after training (targets: pipeline ≤ 100 s, largest ≥ 98.5%, smallest ≥ 97.5%), and per
exported model its ONNX parity (max |logit difference| against PyTorch), test top-1, and predicted vs
measured latency. Prints one JSON object last.

    python -m bench.pipeline_demo [RECIPE] [--out DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from bench.common import ROOT
from ofa.pipeline import PipelineConfig, run_pipeline
from ofa.utils.io import read_json


def training_summary(out: Path) -> dict:
    """Test top-1 of the corner subnets and training wall time, from the run's metrics.jsonl."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    test = [r for r in rows if r.get("kind") == "test"][-1]
    return {
        "train_seconds": round(float(test["elapsed_s"]), 1),
        "largest_top1": round(float(test["largest"]["top1"]), 2),
        "smallest_top1": round(float(test["smallest"]["top1"]), 2),
    }


def export_summary(row: dict) -> dict:
    """One summary row's export: targets the search answers with one subnet share its exported files, so the
    target is the row's, the rest its export's."""
    doc = read_json(Path(row["onnx"]).with_suffix(".export.json"), "export summary")
    latency = doc.get("latency_fp32") or {}
    return {
        "target_ms": row["target_ms"],
        "parity_max_abs": doc["parity"]["max_abs_diff"],
        "top1_fp32": doc.get("top1_fp32"),
        "predicted_ms": doc.get("predicted_latency_ms"),
        "measured_ms": latency.get("mean_ms"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", default=str(ROOT / "recipes" / "digits.yaml"))
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "pipeline_demo")
    parser.add_argument("--json", action="store_true", help="print only the JSON summary line")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    start = time.perf_counter()
    result = run_pipeline(
        PipelineConfig(recipe=Path(args.recipe), out=args.out), log=(lambda _line: None) if args.json else print
    )
    seconds = time.perf_counter() - start
    exports = [export_summary(row) for row in result.rows]
    summary = {
        "pipeline_seconds": round(seconds, 1),
        **training_summary(args.out),
        "stage_seconds": result.seconds,
        "parity_max_abs": max(e["parity_max_abs"] for e in exports),
        "exports": exports,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
