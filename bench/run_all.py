"""Run every benchmark, collect the JSON object each prints last, and write bench/RESULTS.md.

Each benchmark runs in its own process, one after the other, so none competes with another for
the CPU. Results are kept in bench/results.json: ``--only NAME`` reruns a subset and keeps the other
entries, and RESULTS.md is rendered from all of them. ``--quick`` uses smaller settings.
The progressive-shrinking benchmarks train for a long time: they run only with ``--ps`` (or when
named in ``--only``); their finished runs are cached, so a rerun resumes.
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
        "one SGD step of the supernet / the extracted static model (target ≤ 1.03)",
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
        ["bench/ps_vs_scratch.py", "--recipe", "digits", "--json"],
        "digits: test top-1 of 8 subnets, progressive shrinking vs the same subnet trained from scratch "
        "(best of an lr grid, 2 seeds each side; target: PS within 0.5 points or better, PS at most 4x the "
        "largest subnet's scratch run)",
        ["bench/ps_vs_scratch.py", "--recipe", "digits", "--seeds", "0", "--random", "0", "--lr-factors", "1",
         "--no-convergence", "--json"],
    ),
    "ps_vs_scratch_fashion": (
        ["bench/ps_vs_scratch.py", "--recipe", "fashion", "--scratch-epochs", "40", "--json"],
        "Fashion-MNIST: the same comparison on recipes/fashion_mnist.yaml",
        ["bench/ps_vs_scratch.py", "--recipe", "fashion", "--seeds", "0", "--random", "0", "--lr-factors", "1",
         "--no-convergence", "--set", "data.train_subset=2000", "--set", "data.test_subset=1000", "--json"],
    ),
}
ON_REQUEST = ("ps_vs_scratch", "ps_vs_scratch_fashion")  # long: only with --ps or --only


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


def _ps_table(result: dict) -> list[str]:
    """PS vs scratch per subnet, then the cost line (the bench's JSON is nested)."""
    lines = ["| subnet | MMACs | PS top-1 | scratch top-1 | PS − scratch | scratch lr | scratch at 2× epochs |",
             "|---|---|---|---|---|---|---|"]
    for name, r in result["subnets"].items():
        s = r["scratch"]
        twice = f"{s['test_top1_2x']:.2f}" if "test_top1_2x" in s else "not run"
        lines.append(f"| {name} | {r['macs'] / 1e6:.2f} | {r['ps_top1']:.2f} | {s['test_top1']:.2f} | "
                     f"{r['delta']:+.2f} | {s['lr']:g} | {twice} |")
    largest = result["subnets"]["largest"]["scratch"]
    lines += ["", f"{result['train_images']} training / {result['test_images']} test images, seeds {result['seeds']}. "
              f"PS run {result['ps_seconds']:.0f} s ({result['ps_train_images']:,} subnet-images); largest subnet "
              f"from scratch {largest['seconds']:.0f} s ({largest['train_images']:,} images); PS / scratch-largest "
              f"{result['ps_seconds'] / largest['seconds']:.2f} (budget 4). Within 0.5 points everywhere: "
              f"{'yes' if result['within_target'] else 'no'}; scratch converged: "
              f"{'yes' if result['scratch_converged'] else 'no'}."]
    return lines


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
        if run["result"].get("skipped"):
            lines.append(f"(skipped: {run['result']['skipped']})")
        elif "ps_seconds" in run["result"]:  # the PS-vs-scratch report
            lines += _ps_table(run["result"])
        elif run["result"]:
            lines += ["| figure | value |", "|---|---|"]
            lines += [f"| {k} | {_cell(v)} |" for k, v in run["result"].items()]
        else:
            lines.append("(no result: the command failed)")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these benchmarks")
    parser.add_argument("--ps", action="store_true", help="also run the (long, cached) PS-vs-scratch benchmarks")
    parser.add_argument("--quick", action="store_true", help="smaller settings (a smoke run, not for RESULTS.md)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from ofa.io import write_json, write_text

    store = HERE / "results.json"
    kept = {r["name"]: r for r in json.loads(store.read_text())} if store.is_file() and not args.quick else {}
    names = args.only or [n for n in BENCHMARKS if args.ps or n not in ON_REQUEST]
    runs = [run_one(name, args.quick) for name in names]
    merged = {**kept, **{r["name"]: r for r in runs}}
    ordered = [merged[name] for name in BENCHMARKS if name in merged]
    if not args.quick:
        write_json(store, ordered)
    write_text(args.out, render(ordered))
    print(f"wrote {args.out}")
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
