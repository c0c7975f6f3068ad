"""The processor this process runs on: its name, as tables, exports and benchmarks record it, and torch's
threads on it."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch


def cpu_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (what latency depends on), else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    try:
        lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    except OSError:
        lines = []
    for line in lines:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Torch's intra-op threads set to ``threads`` inside the block, restored after (None: left as they are)."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
