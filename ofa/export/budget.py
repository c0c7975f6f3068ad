"""Did the exported subnet meet the latency budget it was searched for, on this machine?

A table built on another machine, or on this one while it was quieter or faster, predicts a latency the
machine does not give. The measured latency is compared with the budget; a miss by more than the table's
noise and the measurement's own (the half-widths of both 95% intervals, added) is flagged with what was
different and the command that builds a table here.
"""

from __future__ import annotations

from ofa.export.result import BudgetVerdict
from ofa.families.family import Arch
from ofa.lut.measure import Latency
from ofa.runtime.runtimes import runtime_info
from search.latency import LatencyTable


def budget_verdict(
    arch: Arch, measured: Latency | None, table: LatencyTable | None, space_arg: str = "SPACE"
) -> BudgetVerdict | None:
    """The verdict for an arch the search stamped with ``target_ms``; None without a target or a measurement.

    ``space_arg`` is what ``ofa lut build --space`` should be given in the advice (the supernet file).
    """
    target = arch.extra.get("target_ms")
    if not isinstance(target, int | float) or measured is None:
        return None
    meta = table.meta if table is not None else {}
    noise = table.noise_pct() if table is not None else None
    backend = str(meta.get("backend", "ort-cpu"))
    this_cpu = runtime_info("ort-cpu")["cpu"]
    table_cpu = meta.get("cpu")
    dtype = f" --dtype {table.dtype}" if table is not None and table.dtype != "float32" else ""  # rebuild it in INT8
    build = (
        f"`ofa lut build --space {space_arg} --backend {backend}{dtype} --out latency_tables/<this machine>.yaml`, "
        "then search again"
    )
    other = table_cpu is not None and table_cpu != this_cpu
    advice = (
        f"build a table on this machine: {build}"
        if other
        else f"the machine is slower or noisier now than when the table was built: rebuild it with {build}"
    )
    return BudgetVerdict(
        target_ms=float(target),
        measured_ms=float(measured.mean_ms),
        margin_pct=max(BudgetVerdict.MIN_MARGIN_PCT, (noise or 0.0) + (measured.ci_pct or 0.0)),
        table_cpu=str(table_cpu) if table_cpu is not None else None,
        this_cpu=this_cpu,
        advice=advice,
    )
