"""Choice lists of a space's ``space:`` mapping, parsed and shown the same way by every family."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ofa.utils.errors import SpaceError


def fmt_choices(values: Sequence[int]) -> str:
    """A choice list for a message: long evenly spaced lists (resolutions) as ``a..b step s``."""
    values = list(values)
    if len(values) > 6:
        steps = {b - a for a, b in itertools.pairwise(values)}
        if len(steps) == 1:
            return f"{values[0]}..{values[-1]} step {steps.pop()}"
    return str(values)


def parse_int_tuple(value: Any, source: str) -> tuple[int, ...]:
    """A list of integers, or a ``{start, stop[, step]}`` range with ``stop`` included."""
    if isinstance(value, Mapping) and set(value) <= {"start", "stop", "step"}:
        try:
            return tuple(range(int(value["start"]), int(value["stop"]) + 1, int(value.get("step", 1))))
        except (KeyError, TypeError, ValueError):
            raise SpaceError(f"{source}: range needs integer start, stop and optional step") from None
    if not isinstance(value, list | tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SpaceError(f"{source}: expected a list of integers, got {value!r}")
    return tuple(value)


def fingerprint_of(space_dict: dict[str, Any]) -> str:
    """Short stable hash of a space's ``to_dict``; tables, predictors and checkpoints record it."""
    return hashlib.sha256(json.dumps(space_dict, sort_keys=True).encode()).hexdigest()[:16]
