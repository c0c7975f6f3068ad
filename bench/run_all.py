"""Run every benchmark, collect the JSON object each prints last, and write bench/RESULTS.md.

Each benchmark runs in its own process, one after the other, so none competes with another for
the CPU. Results are kept in bench/results.json: ``--only NAME`` reruns a subset and keeps the other
entries, and RESULTS.md is rendered from all of them. ``--quick`` uses smaller settings.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# name -> (command, what the figures mean, quick variant of the command)
BENCHMARKS: dict[str, tuple[list[str], str, list[str]]] = {
    "elastic_overhead": (
        ["bench/elastic_overhead.py", "--json"],
        "one SGD step of the supernet / the extracted static model, largest, middle (median MACs of 1,000 "
        "seeded samples) and smallest subnet: median of per-round ratios and their interquartile range (target ≤ 1.03)",
        ["bench/elastic_overhead.py", "--json", "--rounds", "5"],
    ),
    "search_speed": (
        ["bench/search_speed.py", "--json"],
        "seconds of one default OFA evolutionary search on the mbv3 table (target ≤ 1 s), "
        "and its result vs the best of 10,000 random feasible subnets",
        ["bench/search_speed.py", "--json"],
    ),
    "lut_check_mbv3": (
        ["-m", "ofa", "lut", "check", "latency_tables/mbv3_ort-cpu_t1_b1.yaml", "--resolutions", "160", "224",
         "--n", "50", "--json", "--quiet", "--out", "runs/bench/lut_check"],
        "shipped mbv3 table vs 50 measured whole subnets per resolution (target ≥ 95% within ±10%, "
        "Spearman ≥ 0.95 per resolution)",
        ["-m", "ofa", "lut", "check", "latency_tables/mbv3_ort-cpu_t1_b1.yaml", "--resolutions", "160", "224",
         "--n", "10", "--json", "--quiet", "--out", "runs/bench/lut_check"],
    ),
    "ps_vs_scratch": (
        ["bench/ps_vs_scratch.py", "recipes/digits.yaml", "--json"],
        "test top-1 of 3 subnets: progressive shrinking vs the same subnet trained from scratch "
        "(target: PS within 0.5 points or better)",
        ["bench/ps_vs_scratch.py", "recipes/digits.yaml", "--json"],
    ),
}


def run_one(name: str, quick: bool) -> dict:
    command, meaning, quick_command = BENCHMARKS[name]
    argv = [sys.executable, *(quick_command if quick else command)]
    print(f"== {name}: {' '.join(argv[1:])}", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    lines = [line for line in proc.stdout.strip().splitlines() if line.strip()]
    result: dict = {}
    if proc.returncode == 0 and lines:
        try:
            result = json.loads(lines[-1])
        except json.JSONDecodeError:
            result = {}
    if proc.returncode != 0 or not result:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"   failed (exit {proc.returncode}): {tail[0]}", flush=True)
    else:
        print(f"   {json.dumps(result)}", flush=True)
    return {"name": name, "command": "python " + " ".join(argv[1:]), "meaning": meaning, "exit": proc.returncode,
            "seconds": round(seconds, 1), "date": str(datetime.date.today()), "result": result}


def _cell(value: object) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def render(runs: list[dict]) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Written by `python bench/run_all.py` ({platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}); each section gives the date its figures were measured.",
        "Each figure is a ratio or a median measured within one run; rerun a line's command to reproduce it.",
        "",
    ]
    for run in runs:
        lines += [f"## {run['name']}", "", run["meaning"] + ".", "", f"`{run['command']}` "
                  f"(exit {run['exit']}, {run['seconds']} s, {run.get('date', '')})", ""]
        if run["result"]:
            lines += ["| figure | value |", "|---|---|"]
            lines += [f"| {k} | {_cell(v)} |" for k, v in run["result"].items()]
        else:
            lines.append("(no result: the command failed)")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these benchmarks")
    parser.add_argument("--quick", action="store_true", help="smaller settings (a smoke run, not for RESULTS.md)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from ofa.io import write_json, write_text

    store = HERE / "results.json"
    kept = {r["name"]: r for r in json.loads(store.read_text())} if store.is_file() and not args.quick else {}
    runs = [run_one(name, args.quick) for name in (args.only or BENCHMARKS)]
    merged = {**kept, **{r["name"]: r for r in runs}}
    ordered = [merged[name] for name in BENCHMARKS if name in merged]
    if not args.quick:
        write_json(store, ordered)
    write_text(args.out, render(ordered))
    print(f"wrote {args.out}")
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
