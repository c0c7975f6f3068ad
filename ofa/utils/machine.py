"""The processor this process runs on, as tables, exports and benchmarks record it."""

from __future__ import annotations

import platform
from pathlib import Path


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
