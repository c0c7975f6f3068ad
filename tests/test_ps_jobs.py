"""`bench.ps_jobs`: pending runs shared by workers through claim files, planned again after each run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from bench import ps_jobs
from bench.ps_jobs import Job, Plan


def _jobs(done: set[str], names: list[str], ran: list[str]) -> list[Job]:
    def run(name: str) -> None:
        ran.append(name)
        done.add(name)

    return [Job(n, "scratch", n, 2, 2, lambda n=n: run(n)) for n in names if n not in done]


def test_a_worker_runs_every_pending_job_and_plans_again_after_each(tmp_path):
    done, ran = set(), []

    def plan() -> Plan:  # "b" is asked for only once "a" is done: a decision that waited on a result
        names = ["a"] if "a" not in done else ["b", "c"]
        return Plan(tuple(_jobs(done, names, ran)), ())

    ps_jobs.work(plan, tmp_path / "claims", worker=1, workers=2, log=lambda _: None)
    assert ran == ["a", "c", "b"]  # worker 1 of 2 starts on the second free job
    assert not list((tmp_path / "claims").iterdir())  # claims are released


def test_a_claim_held_by_a_live_process_is_skipped_and_a_dead_ones_taken_over(tmp_path):
    claims, done, ran = tmp_path / "claims", set(), []
    jobs = _jobs(done, ["a", "b"], ran)
    assert ps_jobs.claim(claims, jobs[0]) is not None and ps_jobs.claim(claims, jobs[0]) is None  # exclusive
    assert ps_jobs.claimed(claims, jobs[0]) and not ps_jobs.claimed(claims, jobs[1])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (claims / "b.claim").write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout)}))
    assert not ps_jobs.claimed(claims, jobs[1]) and ps_jobs.claim(claims, jobs[1]) is not None  # taken over
    owner = json.loads((claims / "b.claim").read_text())
    assert owner["pid"] == os.getpid() and owner["job"] == "b"
    (claims / "a.claim").write_text(json.dumps({"host": "another-machine", "pid": 1}))
    assert ps_jobs.claimed(claims, jobs[0])  # another host's process: assumed alive


def test_worker_parsing_and_the_plan_text(tmp_path):
    assert ps_jobs.parse_worker("1/2") == (1, 2)
    for bad in ("2/2", "-1/2", "x"):
        with pytest.raises(ValueError):
            ps_jobs.parse_worker(bad)
    jobs = (Job("a", "ps", "PS seed 0", 61, 181, print), Job("b", "scratch", "twin", 20, 20, print, 3600.0))
    lines = ps_jobs.plan_text(Plan(jobs, ("x waits on y",)), tmp_path)
    assert "PS seed 0" in lines[1] and " 61 " in lines[1] and lines[2].rstrip().endswith("3600")
    assert "2 pending, 81 epochs" in lines[3] and "1.00 h" in lines[3] and lines[4] == "waits: x waits on y"
