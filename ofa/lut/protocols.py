"""Which latency protocol a table names, what a command line changes in it, and timing models with it.

The protocols themselves (`Standalone`, the default, and the older `Interleaved`) are `ofa.lut.timing`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any

from ofa.lut.interleaved import Interleaved
from ofa.lut.stats import Stats
from ofa.lut.timing import Standalone
from ofa.runtime.runtimes import Runner
from ofa.utils.errors import OFAError

Protocol = Standalone | Interleaved
PROTOCOLS: dict[str, type[Standalone] | type[Interleaved]] = {"standalone": Standalone, "interleaved": Interleaved}


def protocol_from_dict(d: Any, source: str = "protocol") -> Protocol:
    """The protocol a table's meta names (``kind``: standalone, or interleaved-rounds, which tables from
    before the standalone protocol name or leave out)."""
    if not isinstance(d, Mapping):
        raise OFAError(f"{source}: expected a mapping")
    kinds = {cls.kind: cls for cls in PROTOCOLS.values()}
    cls = kinds.get(str(d.get("kind", Interleaved.kind)))
    if cls is None:
        raise OFAError(f"{source}.kind: {d.get('kind')!r} is not one of {list(kinds)}")
    names = {f.name for f in fields(cls)}
    settings = {k: v for k, v in d.items() if k in names}
    if cls is Standalone:
        settings.setdefault("estimator", "median")  # tables from before the quantile estimator name none
        settings.setdefault("burn_in_s", 0.0)  # nor did tables from before the burn-in
        settings.setdefault("span_s", 0.0)  # nor those from before the least span
    try:
        return cls(**settings)
    except OFAError as exc:
        raise OFAError(f"{source}: {exc}") from None


def with_overrides(protocol: Protocol, changes: Mapping[str, Any]) -> Protocol:
    """``protocol`` with what a command line asks for (a value None: keep): ``repeats`` are blocks (standalone) or
    rounds (interleaved); the other names are the protocol's own fields (``warmup``, ``clock``, the standalone
    estimator's ``target_pct``, ``block_ms``, ...), and a field the protocol lacks is one line naming it."""
    given = {k: v for k, v in changes.items() if v is not None}
    if "repeats" in given:
        given["blocks" if isinstance(protocol, Standalone) else "rounds"] = given.pop("repeats")
    unknown = sorted(given.keys() - {f.name for f in fields(protocol)})
    if unknown:
        raise OFAError(f"protocol.{unknown[0]}: the {protocol.kind} protocol has no such setting")
    return replace(protocol, **given)


def time_models(
    runners: Mapping[str, Runner], protocol: Protocol, progress: Callable[[int], None] | None = None
) -> dict[str, Stats]:
    """Every runner timed with ``protocol``: name -> stats; progress advances per block or round."""
    return protocol.measure(runners, progress)
