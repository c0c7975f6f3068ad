"""`make demo` and `make test` as a new user runs them: a fresh clone of the committed tree, nothing cached.

Steps, each timed on the wall clock: the install (`make .venv/.installed`: venv, torch, the project with
its test extras), the demo pipeline (`make demo`, the venv now there: ``demo_pipeline_seconds``, the process's
start and imports included; ``demo_stage_seconds`` is the sum of its stages, as the pipeline prints it and the
`pipeline_demo` row measures it), then `make test`.
With ``--repeat N`` the demo runs from N new clones (test and busy loop in the first). Then, with
``--busy``, the demo's table stage again in the same clone with a busy loop pinned to the core the
measurement runs on (`taskset`): the stages after training are redone, the table is built under that
load, and the run must still finish, printing the noise warning and writing the table. The clone is
deleted at the end (a clone with its venv is several GB).

One JSON object last (``--json``): the seconds, the demo's largest/smallest test top-1, the table's noise
per resolution, the warning lines, `make test`'s pass count, and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.common import ROOT, keep_stages

TOP1 = re.compile(r"test top-1: largest \(\S+\) ([\d.]+)%, smallest \(\S+\) ([\d.]+)%")
PASSED = re.compile(r"(\d+) passed")
STAGES = re.compile(r"stage seconds: .*\(total ([\d.]+)\)")  # the pipeline's own closing line


def timed(argv: list[str], cwd: Path, log: Path) -> tuple[float, int, str]:
    """Run ``argv`` in ``cwd``; (seconds, exit code, output), the output also written to ``log``."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    log.write_text(done.stdout + done.stderr)
    return round(seconds, 1), done.returncode, done.stdout + done.stderr


def table_noise(clone: Path) -> dict[str, dict]:
    path = clone / "runs" / "digits" / "latency_table.yaml"
    if not path.is_file():
        return {}
    per = (yaml.safe_load(path.read_text())["meta"].get("noise") or {}).get("per_resolution") or {}
    return {str(r): {k: rec.get(k) for k in ("noise_pct", "spread_pct", "noisy")} for r, rec in per.items()}


def warnings_in(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if "warning:" in line]


def busy_demo(clone: Path, logs: Path) -> dict:
    """The demo again with its table stage under a busy loop on the same core (core 0)."""
    run = clone / "runs" / "digits"
    (run / "latency_table.yaml").unlink()
    keep_stages(run / "pipeline.json", ("train", "collect", "fit"))  # the table stage and those after it run again
    hog = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
    try:
        seconds, code, out = timed(["taskset", "-c", "0", "make", "demo"], clone, logs / "busy_demo.log")
    finally:
        hog.kill()
        hog.wait()
    return {
        "busy_demo_exit": code,
        "busy_demo_seconds": seconds,
        "busy_table_written": (clone / "runs" / "digits" / "latency_table.yaml").is_file(),
        "busy_table_noise": table_noise(clone),
        "busy_warnings": warnings_in(out),
    }


def fresh_demo(logs: Path, run_tests: bool, busy: bool) -> dict:
    """One new clone: install, `make demo`, then (if asked) `make test` and the busy-loop table stage."""
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ofa-fresh-"))
    clone = work / "ofa"
    try:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True)
        install_s, install_code, _ = timed(["make", ".venv/.installed"], clone, logs / "install.log")
        demo_s, demo_code, demo_out = timed(["make", "demo"], clone, logs / "demo.log")
        top1, stages = TOP1.search(demo_out), STAGES.findall(demo_out)
        result = {
            "commit": commit.stdout.strip(),
            "install_seconds": install_s,
            "install_exit": install_code,
            "demo_pipeline_seconds": demo_s,
            "demo_stage_seconds": float(stages[-1]) if stages else None,
            "demo_exit": demo_code,
            "demo_total_seconds": round(install_s + demo_s, 1),
            "largest_top1": float(top1.group(1)) if top1 else None,
            "smallest_top1": float(top1.group(2)) if top1 else None,
            "table_noise": table_noise(clone),
            "warnings": warnings_in(demo_out),
        }
        if run_tests:
            test_s, test_code, test_out = timed(["make", "test"], clone, logs / "test.log")
            passed = PASSED.findall(test_out)
            result.update(test_seconds=test_s, test_exit=test_code, test_passed=int(passed[-1]) if passed else None)
        if busy and demo_code == 0:
            result.update(busy_demo(clone, logs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", action="store_true", help="also rebuild the demo's table under a pinned busy loop")
    parser.add_argument("--no-test", action="store_true", help="skip make test")
    parser.add_argument("--repeat", type=int, default=1, help="new clones that run `make demo`")
    parser.add_argument("--logs", type=Path, default=ROOT / "runs" / "bench" / "fresh_clone")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    result = fresh_demo(args.logs / "run1", not args.no_test, args.busy)
    repeats = [fresh_demo(args.logs / f"run{i}", False, False) for i in range(2, args.repeat + 1)]
    runs = [result, *repeats]
    kept = (
        "demo_exit",
        "install_seconds",
        "demo_pipeline_seconds",
        "demo_stage_seconds",
        "largest_top1",
        "smallest_top1",
        "table_noise",
    )
    result["demo_runs"] = [{k: run[k] for k in (*kept, "warnings")} for run in runs]
    result["demo_exits"] = [run["demo_exit"] for run in runs]
    for key, value in result.items():
        print(f"{key}: {value}")
    if args.json:
        print(json.dumps(result))
    ok = all(code == 0 for code in result["demo_exits"])
    ok = ok and result.get("test_exit", 0) == 0 and result.get("busy_demo_exit", 0) == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
