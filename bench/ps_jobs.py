"""Pending runs of the progressive-shrinking benchmarks, shared out between processes.

A benchmark's planner reads its cache and returns the runs its rules ask for now (`Plan.jobs`) and
the decisions that wait on runs not finished yet (`Plan.waiting`). `work` runs them one at a time,
planning again after each, so a decision that needed earlier results is taken as soon as they are
in. Worker ``i`` of ``n`` starts on the ``i``-th free job; a job is claimed by an exclusive file
under the cache (its host and process id), so two workers never run the same job, and a claim whose
process has died on this host is taken over. A worker whose free jobs are all claimed waits for the
others, and stops when nothing is pending.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

POLL_S = 30.0  # how often a worker with nothing free looks again


@dataclass(frozen=True)
class Job:
    """One run the rules ask for: ``run()`` trains it and caches its record."""

    id: str  # the cache name of its record (unique)
    kind: str  # "ps", "scratch", "full" or "schedule"
    desc: str
    epochs: int  # epochs of training
    passes: int  # subnet forward/backward passes per training image (epochs x subnets per step)
    run: Callable[[], object] = field(compare=False, repr=False)
    cpu_estimate: float | None = None  # CPU seconds, from a finished run of the same network where there is one


@dataclass(frozen=True)
class Plan:
    jobs: tuple[Job, ...]
    waiting: tuple[str, ...]  # decisions that wait on runs pending or in progress
    known: tuple[str, ...] = ()  # what the cache holds so far, for a study still running


def parse_worker(text: str) -> tuple[int, int]:
    """``"i/n"`` (0 <= i < n) as (i, n); ValueError otherwise."""
    i, _, n = text.partition("/")
    worker, workers = int(i), int(n)
    if not 0 <= worker < workers:
        raise ValueError(f"--worker {text}: expected i/n with 0 <= i < n")
    return worker, workers


def _alive(claim: Path) -> bool:
    try:
        owner = json.loads(claim.read_text())
    except (OSError, ValueError):
        return False
    if owner.get("host") != socket.gethostname():
        return True  # another machine's process: cannot tell, so assume it runs
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(claims: Path, job: Job) -> Path | None:
    """The claim file of ``job`` if this process got it (a dead process's claim is taken over), else None."""
    claims.mkdir(parents=True, exist_ok=True)
    path = claims / f"{job.id}.claim"
    if path.exists() and not _alive(path):
        path.unlink(missing_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return None
    with os.fdopen(fd, "w") as f:
        json.dump({"host": socket.gethostname(), "pid": os.getpid(), "job": job.desc}, f)
    return path


def claimed(claims: Path, job: Job) -> bool:
    path = claims / f"{job.id}.claim"
    return path.exists() and _alive(path)


def work(plan: Callable[[], Plan], claims: Path, worker: int = 0, workers: int = 1, log=print) -> None:
    """Run pending jobs until none is left (waiting while other workers hold the only free ones)."""
    while True:
        jobs = plan().jobs
        free = [j for j in jobs if not claimed(claims, j)]
        if not jobs:
            return
        if not free:
            log(f"worker {worker}/{workers}: {len(jobs)} run(s) in progress elsewhere; waiting")
            time.sleep(POLL_S)
            continue
        job = free[min(worker, len(free) - 1)]
        path = claim(claims, job)
        if path is None:
            continue  # another worker took it meanwhile
        try:
            log(f"worker {worker}/{workers}: {job.desc} ({job.epochs} epochs)")
            job.run()
        finally:
            path.unlink(missing_ok=True)


def plan_text(plan: Plan, claims: Path) -> list[str]:
    """The pending runs (with their epochs and CPU estimate), the decisions that wait and what is known so far,
    for `--plan`."""
    lines = [f"{'run':<52} {'kind':<8} {'epochs':>6} {'passes':>6} {'CPU s (est.)':>12}"]
    for j in plan.jobs:
        cpu = f"{j.cpu_estimate:.0f}" if j.cpu_estimate is not None else "?"
        state = " (in progress)" if claimed(claims, j) else ""
        lines.append(f"{j.desc + state:<52} {j.kind:<8} {j.epochs:>6} {j.passes:>6} {cpu:>12}")
    known = [j.cpu_estimate for j in plan.jobs if j.cpu_estimate is not None]
    lines.append(
        f"{len(plan.jobs)} pending, {sum(j.epochs for j in plan.jobs)} epochs; CPU estimate of the "
        f"{len(known)} with one: {sum(known) / 3600:.2f} h"
    )
    lines += [f"waits: {w}" for w in plan.waiting]
    lines += [f"known: {k}" for k in plan.known]
    return lines
