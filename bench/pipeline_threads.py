"""The demo's stages after training with one torch thread and with torch's default, idle and beside a busy program.

`recipes/digits.yaml` sets ``pipeline.threads: 1``. This measures why: the stages that run in the pipeline's own
process (collect, fit, search, export) on the demo's trained supernet, each configuration from the same trained
folder with the same latency table (built once by a first whole run, so the table stage, which times on one
thread of its own, is left out), with ``--threads 1`` and with torch's default thread count, first on an idle
machine, then while a busy loop (another program, not pinned) holds one core. A pool of threads waits at
every op for its slowest thread, and a thread that shares its core with another program is often the slowest.
``--repeat N`` interleaves the configurations N times; each figure is the median of its N.

    python -m bench.pipeline_threads [--repeat 2] [--out DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from bench.common import ROOT, keep_stages
from ofa.pipeline import PipelineConfig, run_pipeline

RECIPE = ROOT / "recipes" / "digits.yaml"
TIMED = ("collect", "fit", "search", "export")  # the stages in the pipeline's own process, after training


def trained_copy(base: Path, out: Path) -> Path:
    """A run folder holding ``base``'s trained supernet and nothing after it (its train stage is up to date)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copy2(base / "supernet.pt", out / "supernet.pt")
    keep_stages(base / "pipeline.json", ("train",), out / "pipeline.json")
    return out


def after_training(base: Path, out: Path, threads: int) -> dict[str, float]:
    """Seconds of each `TIMED` stage, rerun from ``base``'s training with ``threads`` torch threads."""
    cfg = PipelineConfig(recipe=RECIPE, out=trained_copy(base, out), threads=threads, lut=base / "latency_table.yaml")
    seconds = run_pipeline(cfg, log=lambda _line: None).seconds
    return {stage: seconds[stage] for stage in TIMED}


def measure(base: Path, out: Path, thread_counts: list[int], repeat: int, busy: bool) -> dict[str, dict]:
    """Per thread count: the median total of `TIMED` over ``repeat`` interleaved runs, and each stage's median."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        runs: dict[int, list[dict[str, float]]] = {n: [] for n in thread_counts}
        for _ in range(repeat):
            for n in thread_counts:
                runs[n].append(after_training(base, out / f"t{n}", n))
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    return {
        str(n): {
            "seconds": round(statistics.median(sum(r.values()) for r in rs), 1),
            "stages": {s: round(statistics.median(r[s] for r in rs), 1) for s in TIMED},
        }
        for n, rs in runs.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="interleaved runs per configuration (default 2)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "pipeline_threads")
    parser.add_argument("--json", action="store_true", help="print only the JSON summary line")
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    if default_threads < 2:
        print(json.dumps({"skipped": f"torch uses {default_threads} thread here: nothing to compare"}))
        return 0
    base = args.out / "base"
    shutil.rmtree(args.out, ignore_errors=True)
    run_pipeline(PipelineConfig(recipe=RECIPE, out=base), log=(lambda _line: None) if args.json else print)
    counts = [1, default_threads]
    idle = measure(base, args.out, counts, args.repeat, busy=False)
    busy = measure(base, args.out, counts, args.repeat, busy=True)
    one, pool = str(1), str(default_threads)
    summary = {
        "default_threads": default_threads,
        "stages": list(TIMED),
        "idle_seconds": {n: idle[n]["seconds"] for n in idle},
        "busy_seconds": {n: busy[n]["seconds"] for n in busy},
        "idle_pool_over_one": round(idle[pool]["seconds"] / idle[one]["seconds"], 2),
        "busy_pool_over_one": round(busy[pool]["seconds"] / busy[one]["seconds"], 2),
        "idle_stages": {n: idle[n]["stages"] for n in idle},
        "busy_stages": {n: busy[n]["stages"] for n in busy},
        "repeat": args.repeat,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
