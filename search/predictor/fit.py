"""Fitting the accuracy predictor on collected subnet accuracies, with honest figures.

The measured subnets are cut into three disjoint, seeded splits: one to fit the weights, one to stop
early on, and one that only the report sees. Reporting the early-stopping split would flatter the
predictor (its best epoch was chosen on it), so RMSE and Kendall tau come from the test split, and the
measurement's own test-retest tau is taken on those same test subnets.

INT8 data (``ofa predictor collect --dtype int8``) is fitted in one of two ways (``target``): on the INT8 top-1
directly, or on the drop from float32 (a float32 predictor plus a second MLP on the measured INT8 - float32
difference). ``auto`` fits both and keeps the one whose early-stop split error is lower, so the test split
never chooses and its figures stay honest; both fits' errors are recorded in the predictor's metrics.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import nn
from tqdm import tqdm

from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label
from ofa.utils.io import atomic_write, write_text
from search.predictor.accuracy_file import AccuracyData, load_accuracy
from search.predictor.model import AccuracyPredictor, kendall_tau

MIN_SUBNETS = 10
TARGETS = ("auto", "int8", "drop")


@dataclass(frozen=True)
class FitConfig:
    """How to fit (``ofa predictor fit``'s options): split fractions, MLP size (OFA's 3 x 400 by default) and
    Adam settings."""

    test_fraction: float = field(
        default=0.2,
        metadata={
            "flag": ("--test-fraction", "--holdout"),
            "help": "share of subnets kept for the reported figures only (never used to fit or to stop)",
        },
    )
    stop_fraction: float = field(default=0.15, metadata={"help": "share of subnets that decides early stopping"})
    seed: int = field(default=0, metadata={"help": "seed of the splits, init and batch order"})
    hidden: int = field(default=400, metadata={"help": "hidden width (OFA's 400)"})
    layers: int = field(default=3, metadata={"help": "hidden layers (OFA's 3)"})
    lr: float = field(default=1e-3, metadata={"help": "Adam learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "Adam weight decay"})
    batch_size: int = field(default=256, metadata={"help": "subnets per step"})
    max_epochs: int = field(default=1000, metadata={"flag": "--epochs", "help": "most epochs"})
    patience: int = field(default=50, metadata={"help": "epochs without early-stop improvement"})
    target: Literal["auto", "int8", "drop"] = field(
        default="auto",
        metadata={
            "help": "INT8 data: fit the INT8 top-1 itself (int8), the drop from float32 on top of a float32 "
            "predictor (drop), or both, keeping the lower early-stop error (auto); float32 data: auto only"
        },
    )

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise OFAError(
                f"{field_label(FitConfig, 'target')}: unknown target {self.target!r} (choose from auto, "
                f"{', '.join(TARGETS[1:])})"
            )
        for name in ("hidden", "layers", "max_epochs", "patience", "lr", "batch_size"):
            if not getattr(self, name) > 0:
                raise OFAError(f"{field_label(FitConfig, name)} must be positive, got {getattr(self, name)}")
        if self.weight_decay < 0:
            raise OFAError(f"{field_label(FitConfig, 'weight_decay')} must be >= 0, got {self.weight_decay}")
        for name in ("test_fraction", "stop_fraction"):
            if not 0 < getattr(self, name) < 1:
                raise OFAError(f"{field_label(FitConfig, name)} must be between 0 and 1, got {getattr(self, name)}")
        if self.test_fraction + self.stop_fraction >= 0.9:
            raise OFAError(
                f"{field_label(FitConfig, 'test_fraction')} + {field_label(FitConfig, 'stop_fraction')} must leave "
                f"at least 10% to fit, got {self.test_fraction} + {self.stop_fraction}"
            )


@dataclass
class Splits:
    """Indices of the three disjoint splits of the measured subnets."""

    fit: np.ndarray
    stop: np.ndarray
    test: np.ndarray

    @classmethod
    def draw(cls, n: int, cfg: FitConfig) -> Splits:
        n_test, n_stop = round(cfg.test_fraction * n), round(cfg.stop_fraction * n)
        if n < MIN_SUBNETS or min(n_test, n_stop, n - n_test - n_stop) < 2:
            raise OFAError(
                f"need at least {MIN_SUBNETS} measured subnets to fit, stop early on "
                f"{cfg.stop_fraction:.0%} and test on {cfg.test_fraction:.0%}, got {n}"
            )
        perm = np.random.default_rng(cfg.seed).permutation(n)
        return cls(fit=perm[n_test + n_stop :], stop=perm[n_test : n_test + n_stop], test=perm[:n_test])


@dataclass
class FitReport:
    """What the fitted predictor scores on the test split (never used for weights or stopping)."""

    train_size: int
    stop_size: int
    test_size: int
    epochs: int
    best_epoch: int
    rmse: float
    tau: float
    spread: float  # std of the measured test accuracies: an RMSE well below it is informative
    stop_rmse: float  # on the early-stopping split, at the kept epoch (optimistic by construction)
    retest_tau: float | None = None  # tau between the two validation halves (float32 top-1), same test subnets
    retest_tau_all: float | None = None  # same, over every collected subnet
    dtype: str = "float32"  # of the top-1 predicted (and measured on the test split)
    target: str = "top1"  # what the MLP fitted: top1 (float32 data), int8 or drop
    targets: dict[str, dict[str, float]] | None = None  # INT8 data: each fitted target's stop/test RMSE and tau

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        text = (
            f"test split ({self.test_size} subnets): RMSE {self.rmse:.3f} pts (spread {self.spread:.3f}), "
            f"Kendall tau {self.tau:.3f}"
        )
        if self.dtype == "int8":
            both = ", ".join(f"{t} {e['stop_rmse']:.3f}/{e['rmse']:.3f}" for t, e in (self.targets or {}).items())
            text = f"INT8 top-1 fitted on {self.target} (early-stop/test RMSE: {both}); " + text
        if self.retest_tau is not None:
            text += (
                f"; test-retest tau of the two validation halves {self.retest_tau:.3f} "
                f"(all {self.retest_tau_all:.3f}), "
            )
            text += (
                f"predictor/retest {self.tau / self.retest_tau:.2f}"
                if self.retest_tau > 0
                else "so the measured ranking is mostly noise (a harder task or a larger validation split helps)"
            )
        return text


@dataclass
class FitResult:
    """The predictor, its report, the per-epoch curve and the test split's arrays (for the plot)."""

    predictor: AccuracyPredictor
    report: FitReport
    curve: list[dict[str, float]] = field(default_factory=list)
    test: dict[str, np.ndarray] = field(default_factory=dict)


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


def _train(
    model: AccuracyPredictor,
    x: torch.Tensor,
    y: torch.Tensor,
    stop: tuple[np.ndarray, np.ndarray],
    cfg: FitConfig,
    on_epoch: Callable[[dict[str, float]], None],
) -> tuple[int, int, float]:
    """Adam on MSE of standardised accuracy until the stop split's RMSE has not improved for
    ``patience`` epochs; keeps the best epoch's weights. Returns (epochs run, best epoch, its RMSE)."""
    stop_rows, stop_top1 = stop
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    best = (float("inf"), 0, {k: v.clone() for k, v in model.state_dict().items()})
    epoch = 0
    for epoch in range(1, cfg.max_epochs + 1):
        model.train()
        total = 0.0
        for idx in torch.randperm(len(y), generator=gen).split(cfg.batch_size):
            loss = nn.functional.mse_loss(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        model.eval()
        rmse = _rmse(model.predict_batch(stop_rows), stop_top1)
        on_epoch(
            {"epoch": epoch, "train_rmse": float(np.sqrt(total / len(y))) * float(model.target_std), "stop_rmse": rmse}
        )
        if rmse < best[0]:
            best = (rmse, epoch, {k: v.clone() for k, v in model.state_dict().items()})
        elif epoch - best[1] >= cfg.patience:
            break
    model.load_state_dict(best[2])
    model.eval()
    return epoch, best[1], best[0]


def fit_predictor(
    data: AccuracyData, cfg: FitConfig, on_epoch: Callable[[dict[str, float]], None] | None = None
) -> FitResult:
    """Fit the MLP predictor of ``data.space`` on ``data``'s fit split and report its test split; on INT8 data
    it predicts the INT8 top-1 (``cfg.target``: how; see the module docstring).

    Raises ``OFAError`` when there are too few subnets for three splits of at least two each, or an INT8
    target is asked of float32 data.
    """
    rows, top1 = np.asarray(data.rows, dtype=np.int64), np.asarray(data.top1, dtype=np.float64)
    splits = Splits.draw(len(top1), cfg)

    def fit(name: str, target: np.ndarray, measured: np.ndarray, base: AccuracyPredictor | None) -> FitResult:
        dtype = "float32" if name == "top1" else "int8"
        return _fit_one(data, Problem(rows, target, measured, splits, dtype, name), cfg, on_epoch, base)

    if data.top1_int8 is None:
        if cfg.target != "auto":
            raise OFAError(
                f"{field_label(FitConfig, 'target')} {cfg.target}: the data is float32 (collect it with --dtype "
                "int8 to fit INT8 top-1)"
            )
        return fit("top1", top1, top1, None)
    int8 = np.asarray(data.top1_int8, dtype=np.float64)
    fits = {}
    if cfg.target in ("auto", "int8"):
        fits["int8"] = fit("int8", int8, int8, None)
    if cfg.target in ("auto", "drop"):
        fits["drop"] = fit("drop", int8 - top1, int8, fit("top1", top1, top1, None).predictor)
    best = min(fits, key=lambda t: fits[t].report.stop_rmse)
    targets = {t: {k: getattr(f.report, k) for k in ("stop_rmse", "rmse", "tau")} for t, f in fits.items()}
    for f in fits.values():
        f.report.targets = targets
        f.predictor.metrics = f.report.to_dict()
    return fits[best]


@dataclass(frozen=True)
class Problem:
    """One fit: gene ``rows``, the MLP's ``target`` (what it learns, on top of a base predictor's output where
    there is one), the ``measured`` top-1 its predictions are judged on, the splits, and what is predicted."""

    rows: np.ndarray
    target: np.ndarray
    measured: np.ndarray
    splits: Splits
    dtype: str
    name: str


def _fit_one(
    data: AccuracyData,
    problem: Problem,
    cfg: FitConfig,
    on_epoch: Callable[[dict[str, float]], None] | None,
    base: AccuracyPredictor | None,
) -> FitResult:
    """Fit one MLP (over ``base``'s predictions, if any) and report it on the test split."""
    curve: list[dict[str, float]] = []

    def record(m: dict[str, float]) -> None:
        curve.append(m)
        if on_epoch is not None:
            on_epoch(m)

    rows, measured, splits = problem.rows, problem.measured, problem.splits
    fit = splits.fit
    mean, std = float(problem.target[fit].mean()), float(problem.target[fit].std()) or 1.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = AccuracyPredictor(data.space, cfg.hidden, cfg.layers, mean, std, problem.dtype, base)
    x = torch.from_numpy(model.encoder.encode_rows(rows[fit]))
    y = torch.from_numpy(((problem.target[fit] - mean) / std).astype(np.float32))
    epochs, best_epoch, stop_rmse = _train(model, x, y, (rows[splits.stop], measured[splits.stop]), cfg, record)
    test = splits.test
    pred = model.predict_batch(rows[test])
    report = FitReport(
        train_size=len(fit),
        stop_size=len(splits.stop),
        test_size=len(test),
        epochs=epochs,
        best_epoch=best_epoch,
        rmse=_rmse(pred, measured[test]),
        tau=kendall_tau(pred, measured[test]),
        spread=float(measured[test].std()),
        stop_rmse=stop_rmse,
        dtype=problem.dtype,
        target=problem.name,
    )
    if data.halves is not None:
        a, b = (np.asarray(v, dtype=np.float64) for v in data.halves)
        report.retest_tau = kendall_tau(a[test], b[test])
        report.retest_tau_all = kendall_tau(a, b)
    model.metrics = report.to_dict()
    return FitResult(model, report, curve, {"rows": rows[test], "measured": measured[test], "predicted": pred})


def fit_predictor_file(accuracy: str | Path, out: str | Path | None, cfg: FitConfig) -> tuple[FitResult, Path]:
    """`ofa predictor fit`: fit on a collection file, write the predictor, its curve (JSONL) and plot (PNG)."""
    data = load_accuracy(accuracy)
    out = Path(out) if out else Path(accuracy).parent / "predictor.pt"
    runs = None if data.top1_int8 is not None else cfg.max_epochs  # INT8 data: up to three fits
    with tqdm(total=runs, desc="fit", unit="epoch", file=sys.stderr) as bar:

        def tick(m: dict[str, float]) -> None:
            bar.update()
            bar.set_postfix(stop_rmse=f"{m['stop_rmse']:.3f}")

        result = fit_predictor(data, cfg, on_epoch=tick)
    result.predictor.metrics["source"] = str(accuracy)
    result.predictor.save(out)
    stem = out.with_suffix("")
    write_text(f"{stem}.fit.jsonl", "".join(json.dumps(m) + "\n" for m in result.curve))
    plot_fit(result, f"{stem}.fit.png")
    return result, out


def plot_fit(result: FitResult, path: str | Path) -> Path:
    """PNG: predicted vs measured top-1 on the test split, and the RMSE curves of the fit."""
    report, curve, test = result.report, result.curve, result.test
    fig = Figure(figsize=(11, 4.5))
    ax, cx = fig.subplots(1, 2)
    measured, predicted = test["measured"], test["predicted"]
    ax.scatter(measured, predicted, s=8, alpha=0.7)
    lo, hi = float(min(measured.min(), predicted.min())), float(max(measured.max(), predicted.max()))
    ax.plot([lo, hi], [lo, hi], color="k", lw=0.8)
    what = "INT8 top-1" if report.dtype == "int8" else "top-1"
    ax.set_xlabel(f"measured {what} (%)")
    ax.set_ylabel(f"predicted {what} (%)")
    ax.set_title(
        f"test split: RMSE {report.rmse:.3f}, Kendall tau {report.tau:.3f}"
        + (f" (retest {report.retest_tau:.3f})" if report.retest_tau is not None else ""),
        fontsize=10,
    )
    epochs = [m["epoch"] for m in curve]
    cx.plot(epochs, [m["train_rmse"] for m in curve], label="fit split")
    cx.plot(epochs, [m["stop_rmse"] for m in curve], label="early-stop split")
    cx.axvline(report.best_epoch, color="k", ls=":", lw=0.8, label="kept")
    cx.set_xlabel("epoch")
    cx.set_ylabel("RMSE (top-1 points)")
    cx.set_yscale("log")
    cx.legend()
    fig.tight_layout()
    return atomic_write(path, lambda p: fig.savefig(p, dpi=110, format="png"))
