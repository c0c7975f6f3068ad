"""Judge a latency table against whole subnets measured on this device with the table's protocol.

Random subnets (never the table's calibration subnets) are built as timm models, exported to the table's
backend and timed side by side in interleaved rounds; predicted and measured latencies are compared per
resolution and overall (MAPE, share within ±10%, Spearman rank correlation).

On a shared machine the speed of the whole machine drifts between the build and the check (other
processes compete for cache and memory bandwidth). The table's drift probes, fixed subnets timed with the
table, are timed again in the same rounds; their median ratio now/then is reported as ``machine_drift``,
with the errors after dividing it out (``drift_adjusted``) beside the raw ones, which stay the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ofa.errors import OFAError
from ofa.space import Arch
from search import measure
from search.latency import LatencyTable
from search.measure import Protocol


@dataclass
class CheckResult:
    rows: list[dict[str, Any]]  # one per subnet: resolution, arch, predicted_ms, measured_ms, error_pct
    summary: dict[str, Any] = field(default_factory=dict)  # overall and per resolution


def sample_check_archs(table: LatencyTable, resolutions: Sequence[int], n: int, seed: int) -> list[Arch]:
    """``n`` distinct random subnets per resolution, none of them a calibration subnet of the table."""
    space = table.space
    excluded = set(table.calibration_archs()) | {a for r in resolutions for a, _ in table.probes(r)}
    rng = np.random.default_rng([seed, 7919])
    archs: list[Arch] = []
    for r in resolutions:
        if r not in space.resolutions:
            raise OFAError(f"--resolutions: {r} is not measured by this table ({list(space.resolutions)})")
        picked: list[Arch] = []
        for _ in range(100 * n):
            if len(picked) == n:
                break
            arch = space.sample(rng, resolutions=[r])
            if arch not in excluded and arch not in picked:
                picked.append(arch)
        if len(picked) < n:
            raise OFAError(f"resolution {r}: the space has fewer than {n} subnets outside the calibration set")
        archs.extend(picked)
    return archs


def summarize_errors(predicted: Sequence[float], measured: Sequence[float]) -> dict[str, float | int]:
    from scipy.stats import spearmanr

    p, m = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    err = p / m - 1
    rho = float(spearmanr(p, m).statistic) if len(p) > 2 and np.ptp(m) > 0 else float("nan")
    return {"n": len(p), "mape": round(float(np.mean(np.abs(err)) * 100), 3),
            "within_10pct": round(float(np.mean(np.abs(err) <= 0.10) * 100), 2),
            "spearman": round(rho, 4), "max_abs_error_pct": round(float(np.max(np.abs(err)) * 100), 3)}


def check_table(table: LatencyTable, *, n: int = 50, resolutions: Sequence[int] | None = None, seed: int = 0,
                protocol: Protocol | None = None, progress: bool = True) -> CheckResult:
    """Measure ``n`` random subnets per resolution and compare them with the table's predictions."""
    if n < 1:
        raise OFAError(f"--n: need at least 1 subnet, got {n}")
    meta = table.meta
    backend = meta["backend"]
    measure.check_backend(backend)
    protocol = protocol or Protocol.from_dict(meta["protocol"], f"{table.source}: meta.protocol")
    resolutions = list(resolutions or table.space.resolutions)
    archs = sample_check_archs(table, resolutions, n, seed)
    probes = [(a, then) for r in resolutions for a, then in table.probes(r)]
    runners = measure.subnet_runners(table.space, tqdm(archs, desc="export subnets", disable=not progress,
                                                       leave=False), backend, meta["batch"], meta["threads"])
    probe_runners = measure.subnet_runners(table.space, [a for a, _ in probes], backend, meta["batch"],
                                           meta["threads"])
    with tqdm(total=protocol.rounds, desc=f"time {len(runners) + len(probe_runners)} subnets",
              disable=not progress) as bar:
        stats = measure.time_interleaved({**runners, **{f"<probe>{k}": v for k, v in probe_runners.items()}},
                                         protocol, bar.update)
    drift = {}
    for r in resolutions:
        ratios = [stats[f"<probe>{name}"]["mean_ms"] / then
                  for name, (a, then) in zip(probe_runners, probes) if a.resolution == r]
        drift[r] = float(np.median(ratios)) if ratios else 1.0
    rows = []
    for name, arch in zip(runners, archs):
        predicted, measured = table.predict(arch), stats[name]["mean_ms"]
        rows.append({"resolution": arch.resolution, "arch": arch.to_dict(), "predicted_ms": round(predicted, 4),
                     "measured_ms": round(measured, 4), "std_ms": round(stats[name]["std_ms"], 4),
                     "error_pct": round((predicted / measured - 1) * 100, 3)})
    def judge(selected: list[dict[str, Any]]) -> dict[str, Any]:
        out = summarize_errors([x["predicted_ms"] for x in selected], [x["measured_ms"] for x in selected])
        adjusted = summarize_errors([x["predicted_ms"] for x in selected],
                                    [x["measured_ms"] / drift[x["resolution"]] for x in selected])
        out["drift_adjusted"] = {k: adjusted[k] for k in ("mape", "within_10pct", "max_abs_error_pct")}
        return out

    summary: dict[str, Any] = judge(rows)
    summary["per_resolution"] = {r: {**judge([x for x in rows if x["resolution"] == r]),
                                     "machine_drift": round(drift[r], 4)} for r in resolutions}
    summary["protocol"] = protocol.to_dict()
    return CheckResult(rows, summary)


def plot_check(result: CheckResult, path: str | Path, title: str) -> Path:
    """Scatter of predicted vs measured latency per resolution, with the ±10% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ofa.io import atomic_write

    fig, ax = plt.subplots(figsize=(5.5, 5))
    values = [x for r in result.rows for x in (r["predicted_ms"], r["measured_ms"])]
    lo, hi = min(values) * 0.85, max(values) * 1.15
    line = np.linspace(lo, hi, 2)
    ax.plot(line, line, "k-", lw=1, label="exact")
    ax.fill_between(line, line * 0.9, line * 1.1, color="0.85", label="±10%")
    for r, stats in result.summary["per_resolution"].items():
        pts = [(x["measured_ms"], x["predicted_ms"]) for x in result.rows if x["resolution"] == r]
        ax.scatter(*zip(*pts), s=14, label=f"{r} px: {stats['within_10pct']:.0f}% in ±10%, ρ={stats['spearman']:.3f}")
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="measured latency (ms)", ylabel="predicted latency (ms)",
           title=title)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=120))
    plt.close(fig)
    return Path(path)
