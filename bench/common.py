"""What the benchmarks share: where the repository and the study records are, and reading a result back.

Every benchmark prints its result as one JSON object on its last line (with ``--json``); `last_json`
is how `bench.run_all` and the step-timing invocations read it; `keep_stages` makes a pipeline run stages
again; `read_record` and `fill_record` keep a study's finished runs, one JSON line each, so a rerun trains only
what is missing. Imports nothing of the ``ofa`` package: `bench.official_overhead` runs its timing in processes whose
``ofa`` is the official code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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


def read_record(path: Path) -> list[dict[str, Any]]:
    """The rows of a study's record (one JSON object a line); [] where there is none yet."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fill_record(path: Path, wanted: list[dict[str, Any]], run: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Append ``run(key)``'s row for each ``wanted`` key (e.g. ``{"name": ..., "seed": ...}``) that no row of the
    record matches yet, one after another (the record is read again before each: another process may have
    added it meanwhile)."""
    for key in wanted:
        if any(all(row.get(k) == v for k, v in key.items()) for row in read_record(path)):
            continue
        row = run(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")
