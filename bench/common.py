"""What the benchmarks share: where the repository and the study records are, and reading a result back.

Every benchmark prints its result as one JSON object on its last line (with ``--json``); `last_json`
is how `bench.run_all` and the step-timing invocations read it; `keep_stages` makes a pipeline run stages
again. Imports nothing of the ``ofa`` package: `bench.official_overhead` runs its timing in processes whose
``ofa`` is the official code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"  # finished studies' records, kept in the repository


def last_json(output: str) -> dict[str, Any]:
    """The JSON object on the last non-blank line of ``output``; {} where there is none."""
    lines = [line for line in output.splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        return {}
    return result if isinstance(result, dict) else {}


def keep_stages(state: Path, stages: tuple[str, ...], out: Path | None = None) -> None:
    """Write the pipeline state ``state`` (a run's ``pipeline.json``) to ``out`` (default: over itself) with only
    ``stages`` finished: `ofa pipeline` on that folder runs the other stages again."""
    finished = json.loads(state.read_text())
    (out or state).write_text(json.dumps({k: v for k, v in finished.items() if k in stages}))
