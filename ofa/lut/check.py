"""Judge a latency table against whole subnets measured on this device as a user measures them.

Random subnets (never the table's calibration subnets) are built as timm models, exported to the table's
backend and timed standalone (`ofa.lut.timing.Standalone`: each on its own, warm, wall clock; the
table's settings when it was built that way): the latency its predictions are for, whatever protocol
built it. ``protocol="table"`` repeats the table's own protocol instead. Predicted and measured
latencies are compared per resolution and overall (MAPE, share within ±10%, Spearman rank correlation):
those raw errors are the verdict. The measurement's own noise is reported beside them per resolution,
from a test-retest of the check's own subnets: the first block of each resolution is timed again after
its last one, and ``noise_pct`` is the median difference between the two timings (the estimator's own
95% interval, ``ci_pct``, beside it).

Memory stays bounded for any number of subnets: they are loaded and timed in blocks of at most
``MAX_LOADED`` models, and each block's sessions are released before the next is built. With the paired
estimator (the default), one reference, the resolution's largest subnet, stays loaded beside every block of
the resolution and scales them all by one low quantile over the whole span, as one timing scales all of a
table's models: with a reference per block, a host that slowed down for minutes moved whole blocks (an
OpenVINO INT8 check here read every block after the first slower than the first).

On a shared machine the speed of the whole machine drifts between the build and the check (other
processes compete for cache and memory bandwidth). The table's drift probes, fixed subnets timed with the
table, are timed again in the first block of their resolution; their median ratio now/then is reported
as ``machine_drift``, with the errors after dividing it out (``drift_adjusted``) beside the raw ones,
which stay the verdict.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import matplotlib
import numpy as np
from scipy.stats import spearmanr
from tqdm import tqdm

from ofa.families.family import Arch, Space
from ofa.families.registry import family_of, layout_of
from ofa.lut.layer_models import subnet_runners
from ofa.lut.protocols import Protocol, protocol_from_dict, time_models, with_overrides
from ofa.lut.stats import Stats, noise_pct
from ofa.lut.timing import WARN_NOISE_PCT, Standalone
from ofa.runtime.runtimes import backend_device, check_backend, check_dtype
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label
from ofa.utils.io import atomic_write, write_json, write_text
from ofa.utils.tracking import log_figures
from search.latency import LatencyTable, space_from_arg

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# Models loaded at once, a resolution's probes included (its paired reference aside): bounds the memory for
# any --n. Sized for mbv3 subnets at 224 px in a process that stays under 2 GB with torch and onnxruntime loaded.
MAX_LOADED = 8
PROBE = "<probe>"  # the names of the drift probes timed beside a resolution's first block


@dataclass(frozen=True)
class CheckConfig:
    """How many subnets to judge the table on, where, and how long to time them (``ofa lut check``'s options)."""

    n: int = field(default=50, metadata={"help": "random subnets per resolution"})
    resolutions: tuple[int, ...] | None = field(
        default=None, metadata={"help": "resolutions to check (default: all of the table's)"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the subnets and the timing order"})
    dtype: Literal["float32", "int8"] | None = field(
        default=None,
        metadata={
            "help": "the dtype the subnets are judged in: the table's (meta.dtype; int8: each quantized as the "
            "build quantized its models); given, it must agree"
        },
    )
    repeats: int | None = field(
        default=None, metadata={"help": "blocks (standalone) or rounds per model (default: the protocol's)"}
    )
    protocol: Literal["standalone", "table"] = field(
        default="standalone",
        metadata={"help": "standalone: each model on its own, as a user measures it; table: the table's own protocol"},
    )
    target_pct: float | None = field(
        default=None,
        metadata={
            "flag": "--target",
            "metavar": "PCT",
            "help": "standalone: blocks are added until each figure's 95% interval is within ±PCT (default: the "
            "protocol's)",
        },
    )
    budget_s: float | None = field(
        default=None,
        metadata={
            "flag": "--time-budget",
            "metavar": "S",
            "help": "standalone: most seconds of timing per model once its least blocks are in (default: the "
            "protocol's)",
        },
    )
    max_noise_pct: float = field(
        default=WARN_NOISE_PCT,
        metadata={
            "flag": "--max-noise",
            "metavar": "PCT",
            "help": "report a resolution as too noisy to judge when a test-retest of its subnets differs by more "
            "(median, %)",
        },
    )
    progress: bool = field(default=True, metadata={"flag": "--quiet", "invert": True, "help": "no progress bars"})

    def __post_init__(self) -> None:
        if self.n < 1:
            raise OFAError(f"{field_label(CheckConfig, 'n')}: need at least 1 subnet, got {self.n}")
        if not self.max_noise_pct > 0:
            raise OFAError(
                f"{field_label(CheckConfig, 'max_noise_pct')}: expected a positive percentage, got {self.max_noise_pct}"
            )
        if self.protocol not in ("standalone", "table"):
            raise OFAError(
                f"{field_label(CheckConfig, 'protocol')}: expected standalone or table, got {self.protocol!r}"
            )


@dataclass
class CheckResult:
    rows: list[dict[str, Any]]  # one per subnet: resolution, arch, predicted_ms, measured_ms, error_pct
    summary: dict[str, Any] = field(default_factory=dict)  # overall and per resolution


@dataclass(frozen=True)
class CheckReport:
    """What `check_table_file` measured and wrote."""

    result: CheckResult
    summary: dict[str, Any]  # summary.json: the table's path and `CheckResult.summary`
    rows_path: Path
    summary_path: Path
    plot_path: Path
    space: Space  # the space the rows' archs are of


def sample_check_archs(table: LatencyTable, resolutions: Sequence[int], n: int, seed: int) -> list[Arch]:
    """``n`` distinct random subnets per resolution, none of them a calibration subnet or probe of the table."""
    space = table.space
    layout, sample = layout_of(space), family_of(space).sample_arch
    excluded = {
        layout.canonical(layout.encode(a)).tobytes()
        for a in [*table.calibration_archs(), *(a for r in resolutions for a, _ in table.probes(r))]
    }
    rng = np.random.default_rng([seed, 7919])
    archs: list[Arch] = []
    for r in resolutions:
        if r not in space.resolutions:
            raise OFAError(f"--resolutions: {r} is not measured by this table ({list(space.resolutions)})")
        picked: list[Arch] = []
        seen = set(excluded)
        for _ in range(100 * n):
            if len(picked) == n:
                break
            arch = sample(space, rng, resolutions=[r])
            key = layout.canonical(layout.encode(arch)).tobytes()
            if key not in seen:
                seen.add(key)
                picked.append(arch)
        if len(picked) < n:
            raise OFAError(f"resolution {r}: the space has fewer than {n} subnets outside the calibration set")
        archs.extend(picked)
    return archs


def judged_dtype(table: LatencyTable, dtype: str | None) -> str:
    """The dtype a check judges ``table`` in: its own; a ``dtype`` asked for that disagrees is one line."""
    if dtype is not None and dtype != table.dtype:
        raise OFAError(
            f"{field_label(CheckConfig, 'dtype')} {dtype}: {table.source} was measured in {table.dtype} (meta.dtype)"
        )
    check_dtype(str(table.meta["backend"]), table.dtype, f"{table.source}: meta.dtype")
    return table.dtype


def summarize_errors(predicted: Sequence[float], measured: Sequence[float]) -> dict[str, float | int]:
    p, m = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    err = p / m - 1
    rho = float(spearmanr(p, m).statistic) if len(p) > 2 and np.ptp(m) > 0 else float("nan")
    return {
        "n": len(p),
        "mape": round(float(np.mean(np.abs(err)) * 100), 3),
        "within_10pct": round(float(np.mean(np.abs(err) <= 0.10) * 100), 2),
        "spearman": round(rho, 4),
        "max_abs_error_pct": round(float(np.max(np.abs(err)) * 100), 3),
    }


def _blocks(items: Sequence[int], probes: int) -> list[Sequence[int]]:
    """``items`` cut into blocks of at most ``MAX_LOADED`` models, the first leaving room for ``probes``."""
    first = max(1, MAX_LOADED - probes)
    return [items[:first], *(items[i : i + MAX_LOADED] for i in range(first, len(items), MAX_LOADED))]


def _load(table: LatencyTable, archs: Sequence[Arch], prefix: str = "") -> dict[str, Any]:
    """Whole subnets loaded as the table was measured (backend, batch, threads, dtype), named with ``prefix``
    so several sets timed together (a block, the probes, the retest) keep apart."""
    meta = table.meta
    runners = subnet_runners(table.space, archs, meta["backend"], meta["batch"], meta["threads"], table.dtype)
    return {f"{prefix}{k}": v for k, v in runners.items()}


def _time_block(
    table: LatencyTable, archs: Sequence[Arch], probes: Sequence[Arch], protocol: Protocol
) -> tuple[list[Stats], list[Stats]]:
    """Load one block of subnets with the probes, time them together, release them: (subnet, probe) stats."""
    runners, probe_runners = _load(table, archs), _load(table, probes, PROBE)
    stats = time_models(runners | probe_runners, protocol)
    return [stats[k] for k in runners], [stats[k] for k in probe_runners]


def _time_shared(
    table: LatencyTable,
    blocks: Sequence[Sequence[Arch]],
    probes: Sequence[Arch],
    protocol: Standalone,
    advance: Callable[[int], Any],
) -> tuple[list[Stats], list[Stats], list[Stats]]:
    """The blocks of one resolution (probes in the first) each loaded in turn and paired with one reference, the
    resolution's largest subnet, loaded throughout: one low quantile of it over the whole span scales them all,
    as one timing scales a table's models, so a host that slows down for minutes moves no block alone. The first
    block is loaded and timed again after the last against the same reference (the retest): (subnet, probe,
    retest) stats."""
    largest = table.space.max_arch(blocks[0][0].resolution)
    reference = protocol.reference("<reference>", next(iter(_load(table, [largest]).values())))
    names: list[list[str]] = []
    for j, archs in enumerate(blocks):
        runners = _load(table, archs, f"{j}/")
        names.append(list(runners))
        if j == 0:
            runners |= _load(table, probes, PROBE)
        protocol.measure_against(reference, runners)
        del runners  # released before the next block is loaded
        advance(len(archs))
    retest = _load(table, blocks[0], "retest/")
    protocol.measure_against(reference, retest)
    advance(len(blocks[0]))
    stats = protocol.finish(reference)
    probes_stats = [stats[k] for k in stats if k.startswith(PROBE)]
    return [stats[k] for block in names for k in block], probes_stats, [stats[k] for k in retest]


def _measure(
    table: LatencyTable, archs: Sequence[Arch], resolutions: Sequence[int], protocol: Protocol, progress: bool
) -> tuple[list[Stats], dict[int, dict[str, float]]]:
    """Measured stats of every arch (in order), and per resolution the machine drift and the noise.

    Drift: the probes (timed in each resolution's first block) now / at build time. Noise: that first
    block's subnets timed again after the resolution's last block (test-retest, median |difference| %),
    and the widest 95% interval of the estimator among them. With the paired estimator, a resolution's blocks
    and the retest share one reference (`_time_shared`): the retest is timed as the subnets were.
    """
    probes = {r: table.probes(r) for r in resolutions}
    plan = {r: _blocks([i for i, a in enumerate(archs) if a.resolution == r], len(probes[r])) for r in resolutions}
    shared = isinstance(protocol, Standalone) and protocol.estimator == "paired"
    measured: dict[int, Stats] = {}
    per_res: dict[int, dict[str, float]] = {}
    timings = len(archs) + sum(len(blocks[0]) for blocks in plan.values())  # each subnet, and the retests
    with tqdm(total=timings, desc=f"time {len(archs)} subnets (and retest some)", disable=not progress) as bar:
        for r, blocks in plan.items():
            first, order = blocks[0], [i for block in blocks for i in block]
            probe_archs = [a for a, _ in probes[r]]
            if shared:
                subnets = [[archs[i] for i in block] for block in blocks]
                stats, probe_stats, retest = _time_shared(table, subnets, probe_archs, protocol, bar.update)
            else:
                stats, probe_stats = _time_block(table, [archs[i] for i in first], probe_archs, protocol)
                bar.update(len(first))
                for block in blocks[1:]:
                    stats += _time_block(table, [archs[i] for i in block], [], protocol)[0]
                    bar.update(len(block))
                again = replace(protocol, seed=protocol.seed + 1)
                retest = _time_block(table, [archs[i] for i in first], [], again)[0]
                bar.update(len(first))
            measured.update(zip(order, stats))
            ratios = [s["mean_ms"] / then for s, (_, then) in zip(probe_stats, probes[r])]
            first_stats = stats[: len(first)]
            per_res[r] = {
                "machine_drift": float(np.median(ratios)) if ratios else 1.0,
                "noise_pct": float(
                    np.median([abs(b["mean_ms"] / a["mean_ms"] - 1) * 100 for a, b in zip(first_stats, retest)])
                ),
                "ci_pct": noise_pct(dict(enumerate(first_stats)), list(range(len(first_stats)))),
            }
    return [measured[i] for i in range(len(archs))], per_res


def check_protocol(table: LatencyTable, cfg: CheckConfig) -> Protocol:
    """How the check times: standalone (the table's settings if it was built standalone) or the table's own."""
    stored = protocol_from_dict(table.meta["protocol"], f"{table.source}: meta.protocol")
    protocol = stored if cfg.protocol == "table" or isinstance(stored, Standalone) else Standalone()
    if not isinstance(protocol, Standalone):
        return with_overrides(protocol, {"repeats": cfg.repeats})
    return with_overrides(protocol, {"repeats": cfg.repeats, "target_pct": cfg.target_pct, "budget_s": cfg.budget_s})


def check_table(table: LatencyTable, cfg: CheckConfig) -> CheckResult:
    """Measure ``cfg.n`` random subnets per resolution and compare them with the table's predictions.

    Raises `OFAError` for a resolution the table does not cover, a space with too few subnets outside
    the calibration set, a backend this machine lacks, or a ``cfg.dtype`` that is not the table's.
    """
    meta = table.meta
    check_backend(meta["backend"])
    judged_dtype(table, cfg.dtype)
    protocol = check_protocol(table, cfg)
    resolutions = list(cfg.resolutions or table.space.resolutions)
    archs = sample_check_archs(table, resolutions, cfg.n, cfg.seed)
    stats, per_res = _measure(table, archs, resolutions, protocol, cfg.progress)
    drift = {r: per_res[r]["machine_drift"] for r in resolutions}
    rows = []
    for arch, s in zip(archs, stats):
        predicted, measured = table.predict(arch), s["mean_ms"]
        rows.append(
            {
                "resolution": arch.resolution,
                "arch": arch.to_dict(),
                "predicted_ms": round(predicted, 4),
                "measured_ms": round(measured, 4),
                "std_ms": round(s["std_ms"], 4),
                "error_pct": round((predicted / measured - 1) * 100, 3),
            }
        )

    def judge(selected: list[dict[str, Any]]) -> dict[str, Any]:
        out = summarize_errors([x["predicted_ms"] for x in selected], [x["measured_ms"] for x in selected])
        adjusted = summarize_errors(
            [x["predicted_ms"] for x in selected], [x["measured_ms"] / drift[x["resolution"]] for x in selected]
        )
        out["drift_adjusted"] = {k: adjusted[k] for k in ("mape", "within_10pct", "max_abs_error_pct")}
        return out

    summary: dict[str, Any] = judge(rows)
    summary["per_resolution"] = {
        r: {
            **judge([x for x in rows if x["resolution"] == r]),
            **{k: round(v, 4) for k, v in per_res[r].items()},
        }
        for r in resolutions
    }
    summary["too_noisy"] = [r for r in resolutions if per_res[r]["noise_pct"] > cfg.max_noise_pct]
    summary["max_noise_pct"] = cfg.max_noise_pct
    summary["dtype"] = table.dtype
    summary["protocol"] = protocol.to_dict()
    summary["clock"] = protocol.clock_name(backend_device(meta["backend"]), int(meta["threads"]))
    return CheckResult(rows, summary)


def check_table_file(
    table_path: Path, cfg: CheckConfig, space: str | None = None, out: Path | None = None
) -> CheckReport:
    """`check_table` on a table file; writes check.jsonl, summary.json and check.png into ``out``.

    ``space`` (as ``ofa lut build --space`` takes it) also requires the table to cover that space;
    ``out`` defaults to ``runs/lut-check/<table name>``. Raises `OFAError` for an unreadable table.
    """
    table = LatencyTable.load(table_path)
    if space:
        table = table.for_space(space_from_arg(space))
    result = check_table(table, cfg)
    out = out or Path("runs") / "lut-check" / table_path.stem
    rows_path = write_text(out / "check.jsonl", "".join(json.dumps(r) + "\n" for r in result.rows))
    summary = {"table": str(table_path), **result.summary}
    summary_path = write_json(out / "summary.json", summary)
    plot = plot_check(result, out / "check.png", f"{table_path.stem}")
    curves = {f"lut_check/{k}": [r[k] for r in result.rows] for k in ("predicted_ms", "measured_ms")}
    log_figures(out / "tensorboard", curves, {}, lambda text: print(text, file=sys.stderr))  # TensorBoard too
    return CheckReport(result, summary, rows_path, summary_path, plot, table.space)


def plot_check(result: CheckResult, path: str | Path, title: str) -> Path:
    """Scatter of predicted vs measured latency per resolution, with the ±10% band."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    values = [x for r in result.rows for x in (r["predicted_ms"], r["measured_ms"])]
    lo, hi = min(values) * 0.85, max(values) * 1.15
    line = np.linspace(lo, hi, 2)
    ax.plot(line, line, "k-", lw=1, label="exact")
    ax.fill_between(line, line * 0.9, line * 1.1, color="0.85", label="±10%")
    for r, stats in result.summary["per_resolution"].items():
        pts = [(x["measured_ms"], x["predicted_ms"]) for x in result.rows if x["resolution"] == r]
        ax.scatter(*zip(*pts), s=14, label=f"{r} px: {stats['within_10pct']:.0f}% in ±10%, ρ={stats['spearman']:.3f}")
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="measured latency (ms)", ylabel="predicted latency (ms)", title=title)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=120))
    plt.close(fig)
    return Path(path)
