"""Accuracy predictor: an MLP on the paper's arch encoding, so the search never runs the supernet.

The encoding (OFA's MobileNetArchEncoder): per block slot a one-hot kernel and a one-hot expand
ratio, all zeros for slots past the stage's depth (the depth is implicit), then a one-hot
resolution. It works on integer gene rows (``SearchSpace.encode``), so a whole population is
encoded with one scatter. A predictor file stores its space, so it refuses any other space.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import kendalltau
from torch import nn

from ofa.errors import OFAError
from ofa.io import load_torch, save_torch
from ofa.space import Arch, SearchSpace

PREDICTOR_FORMAT = "ofa-predictor"
SMALL_BATCH = 1024  # rows predicted on one thread


@dataclass(frozen=True)
class _Layout:
    genes: int
    slices: dict[str, slice]
    depths: np.ndarray  # depth choice values
    slot_stage: np.ndarray  # stage of each block slot
    slot_index: np.ndarray  # position of each block slot within its stage


@lru_cache(maxsize=16)
def _layout(space: SearchSpace) -> _Layout:
    """Gene layout of a space, computed once (searches call the helpers below every generation)."""
    return _Layout(len(space.gene_sizes), space.gene_slices(), np.asarray(space.depths),
                   np.repeat(np.arange(space.num_stages), space.max_depth),
                   np.tile(np.arange(space.max_depth), space.num_stages))


def active_slots(space: SearchSpace, rows: np.ndarray) -> np.ndarray:
    """(n, num_slots) mask of the block slots each gene row runs (slot index below its stage's depth)."""
    lay = _layout(space)
    rows = np.asarray(rows, dtype=np.int64).reshape(-1, lay.genes)
    depth = lay.depths[rows[:, lay.slices["depths"]]]
    return lay.slot_index[None, :] < depth[:, lay.slot_stage]


def canonical_rows(space: SearchSpace, rows: np.ndarray) -> np.ndarray:
    """Gene rows with unused slots set to choice 0: one row per distinct subnet."""
    lay = _layout(space)
    rows = np.array(rows, dtype=np.int64).reshape(-1, lay.genes)
    inactive = ~active_slots(space, rows)
    for name in ("kernels", "expands"):
        genes = rows[:, lay.slices[name]]  # a view: writes land in rows
        genes[inactive] = 0
    return rows


class ArchEncoder:
    """Gene rows <-> the paper's features: [kernel one-hot | expand one-hot] per slot, resolution one-hot."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.n_kernels, self.n_expands = len(space.kernels), len(space.expands)
        self.per_slot = self.n_kernels + self.n_expands
        self.res_offset = space.num_slots * self.per_slot
        self.dim = self.res_offset + len(space.resolutions)
        self._slot_offset = np.arange(space.num_slots) * self.per_slot

    def encode_rows(self, rows: np.ndarray) -> np.ndarray:
        """(n, dim) float32 features of integer gene rows."""
        lay = _layout(self.space)
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, lay.genes)
        sl = lay.slices
        n = rows.shape[0]
        active = active_slots(self.space, rows).astype(np.float32)
        out = np.zeros((n, self.dim), dtype=np.float32)
        at = np.arange(n)[:, None]
        out[at, self._slot_offset + rows[:, sl["kernels"]]] = active
        out[at, self._slot_offset + self.n_kernels + rows[:, sl["expands"]]] = active
        out[np.arange(n), self.res_offset + rows[:, 0]] = 1.0
        return out

    def encode(self, archs: Arch | Sequence[Arch]) -> np.ndarray:
        archs = [archs] if isinstance(archs, Arch) else list(archs)
        return self.encode_rows(self.space.encode_many(archs))

    def decode(self, features: np.ndarray) -> list[Arch]:
        """Features -> archs (unused slots take the smallest choice); raises on a malformed row."""
        features = np.asarray(features).reshape(-1, self.dim)
        space, d = self.space, self.space.max_depth
        archs = []
        for f in features:
            slots = f[: self.res_offset].reshape(space.num_slots, self.per_slot)
            active = slots[:, : self.n_kernels].sum(1) > 0
            depths = []
            for s in range(space.num_stages):
                used = active[s * d:(s + 1) * d]
                depth = int(used.sum())
                if not used[:depth].all() or depth not in space.depths:
                    raise OFAError(f"features of stage {s} do not describe a depth of this space")
                depths.append(depth)
            kernels = [space.kernels[int(k)] if a else space.kernels[0]
                       for k, a in zip(slots[:, : self.n_kernels].argmax(1), active)]
            expands = [space.expands[int(e)] if a else space.expands[0]
                       for e, a in zip(slots[:, self.n_kernels:].argmax(1), active)]
            res = space.resolutions[int(f[self.res_offset:].argmax())]
            archs.append(Arch(res, tuple(depths), tuple(kernels), tuple(expands)))
        return archs


class AccuracyPredictor(nn.Module):
    """MLP (hidden ReLU layers, as OFA's 3 x 400) from the encoding to top-1 accuracy in percent."""

    def __init__(self, space: SearchSpace, hidden: int = 400, layers: int = 3, target_mean: float = 0.0,
                 target_std: float = 1.0) -> None:
        super().__init__()
        self.space, self.encoder = space, ArchEncoder(space)
        self.hidden, self.layers = hidden, layers
        dims = [self.encoder.dim] + [hidden] * layers
        mods: list[nn.Module] = []
        for a, b in itertools.pairwise(dims):
            mods += [nn.Linear(a, b), nn.ReLU()]
        self.mlp = nn.Sequential(*mods, nn.Linear(dims[-1], 1))
        self.register_buffer("target_mean", torch.tensor(float(target_mean)))
        self.register_buffer("target_std", torch.tensor(float(target_std)))
        self.metrics: dict[str, Any] = {}

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Normalised output; ``predict_*`` map it back to percent."""
        return self.mlp(features).squeeze(-1)

    @torch.inference_mode()
    def predict_batch(self, rows: np.ndarray) -> np.ndarray:
        """Predicted top-1 (percent) of a population of gene rows: one batched call.

        A search population is small: one thread is faster than waking a pool for each layer.
        """
        x = torch.from_numpy(self.encoder.encode_rows(rows))
        threads = torch.get_num_threads()
        if len(x) <= SMALL_BATCH:
            torch.set_num_threads(1)
        try:
            return (self(x) * self.target_std + self.target_mean).double().numpy()
        finally:
            torch.set_num_threads(threads)

    def predict_archs(self, archs: Sequence[Arch]) -> np.ndarray:
        return self.predict_batch(self.space.encode_many(list(archs)))

    def predict(self, arch: Arch) -> float:
        return float(self.predict_archs([arch])[0])

    def check_space(self, space: SearchSpace, what: str) -> None:
        """Refuse to score archs of another space (the encoding would silently mean something else)."""
        if space.fingerprint() != self.space.fingerprint():
            raise OFAError(f"the predictor was fitted on space {self.space.fingerprint()}, but {what} has space "
                           f"{space.fingerprint()}: collect and fit a predictor for this supernet")

    def save(self, path: str | Path) -> Path:
        return save_torch(path, {
            "format": PREDICTOR_FORMAT, "space": self.space.to_dict(), "fingerprint": self.space.fingerprint(),
            "hidden": self.hidden, "layers": self.layers, "state_dict": self.state_dict(),
            "metrics": json.loads(json.dumps(self.metrics)),
        })

    @classmethod
    def load(cls, path: str | Path) -> AccuracyPredictor:
        obj = load_torch(path, "accuracy predictor")
        if obj.get("format") != PREDICTOR_FORMAT:
            raise OFAError(f"{path}: not an accuracy predictor (format={obj.get('format')!r}); "
                           "make one with `ofa predictor fit`")
        space = SearchSpace.from_dict(obj["space"], f"{path}:space")
        if space.fingerprint() != obj.get("fingerprint"):
            raise OFAError(f"{path}: stored space does not match its fingerprint (file edited or corrupted)")
        net = cls(space, int(obj["hidden"]), int(obj["layers"]))
        try:
            net.load_state_dict(obj["state_dict"])
        except (RuntimeError, KeyError) as exc:
            raise OFAError(f"{path}: weights do not fit the stored predictor shape: {str(exc).splitlines()[0]}") \
                from None
        net.metrics = dict(obj.get("metrics") or {})
        return net.eval()


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Rank agreement in [-1, 1] (tau-b, ties allowed); nan for fewer than two points."""
    if len(a) < 2:
        return float("nan")
    return float(kendalltau(a, b).statistic)


@dataclass
class FitReport:
    """What `fit_predictor` measured on the held-out subnets (never used for the weights)."""

    train_size: int
    heldout_size: int
    epochs: int
    best_epoch: int
    rmse: float
    tau: float
    spread: float  # std of the measured held-out accuracies: an RMSE well below it is informative
    retest_tau: float | None = None  # tau between the two validation halves, same held-out subnets
    retest_tau_all: float | None = None  # same, over every collected subnet

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        text = (f"held-out ({self.heldout_size} subnets): RMSE {self.rmse:.3f} pts (spread {self.spread:.3f}), "
                f"Kendall tau {self.tau:.3f}")
        if self.retest_tau is not None:
            text += (f"; test-retest tau of the two validation halves {self.retest_tau:.3f} "
                     f"(all {self.retest_tau_all:.3f}), ")
            text += (f"predictor/retest {self.tau / self.retest_tau:.2f}" if self.retest_tau > 0 else
                     "so the measured ranking is mostly noise (a harder task or a larger validation split helps)")
        return text


def fit_predictor(space: SearchSpace, rows: np.ndarray, top1: np.ndarray, *,
                  retest: tuple[np.ndarray, np.ndarray] | None = None,
                  holdout: float = 0.2, seed: int = 0, hidden: int = 400, layers: int = 3, lr: float = 1e-3,
                  weight_decay: float = 0.0, batch_size: int = 256, max_epochs: int = 1000, patience: int = 50,
                  on_epoch: Callable[[dict[str, float]], None] | None = None,
                  ) -> tuple[AccuracyPredictor, FitReport, dict[str, np.ndarray]]:
    """Fit with Adam on MSE of standardised accuracy; stop when held-out RMSE stops improving.

    The held-out 20% (seeded) decides early stopping and is what the report measures; the best
    epoch's weights are kept. ``retest`` = (top1 of half A, top1 of half B) adds the measurement's
    own test-retest tau. ``on_epoch(dict)`` receives per-epoch metrics. Returns the predictor,
    the report and the held-out arrays (rows, measured, predicted) for plots.
    """
    rows = np.asarray(rows, dtype=np.int64)
    top1 = np.asarray(top1, dtype=np.float64)
    n = len(top1)
    n_hold = round(holdout * n)
    if n < 10 or n_hold < 2 or n - n_hold < 2:
        raise OFAError(f"need at least 10 measured subnets to fit and hold out {holdout:.0%}, got {n}")
    perm = np.random.default_rng(seed).permutation(n)
    hold, train = perm[:n_hold], perm[n_hold:]
    mean, std = float(top1[train].mean()), float(top1[train].std()) or 1.0

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AccuracyPredictor(space, hidden, layers, mean, std)
    enc = model.encoder
    x_train, x_hold = torch.from_numpy(enc.encode_rows(rows[train])), torch.from_numpy(enc.encode_rows(rows[hold]))
    y_train = torch.from_numpy(((top1[train] - mean) / std).astype(np.float32))
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    best = (float("inf"), 0, {k: v.clone() for k, v in model.state_dict().items()})
    epoch = 0
    for epoch in range(1, max_epochs + 1):
        model.train()
        total = 0.0
        for idx in torch.randperm(len(train), generator=gen).split(batch_size):
            loss = nn.functional.mse_loss(model(x_train[idx]), y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        model.eval()
        with torch.inference_mode():
            pred = (model(x_hold) * std + mean).double().numpy()
        rmse = float(np.sqrt(np.mean((pred - top1[hold]) ** 2)))
        if on_epoch is not None:
            on_epoch({"epoch": epoch, "train_rmse": float(np.sqrt(total / len(train))) * std, "heldout_rmse": rmse})
        if rmse < best[0]:
            best = (rmse, epoch, {k: v.clone() for k, v in model.state_dict().items()})
        elif epoch - best[1] >= patience:
            break
    model.load_state_dict(best[2])
    model.eval()
    pred = model.predict_batch(rows[hold])
    report = FitReport(
        train_size=len(train), heldout_size=n_hold, epochs=epoch, best_epoch=best[1],
        rmse=float(np.sqrt(np.mean((pred - top1[hold]) ** 2))), tau=kendall_tau(pred, top1[hold]),
        spread=float(top1[hold].std()),
    )
    if retest is not None:
        a, b = (np.asarray(v, dtype=np.float64) for v in retest)
        report.retest_tau = kendall_tau(a[hold], b[hold])
        report.retest_tau_all = kendall_tau(a, b)
    model.metrics = report.to_dict()
    return model, report, {"rows": rows[hold], "measured": top1[hold], "predicted": pred}


def plot_fit(held: dict[str, np.ndarray], curve: Sequence[dict[str, float]], report: FitReport,
             path: str | Path) -> Path:
    """PNG: predicted vs measured top-1 on the held-out subnets, and the RMSE curves of the fit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ofa.io import atomic_write

    fig, (ax, cx) = plt.subplots(1, 2, figsize=(11, 4.5))
    measured, predicted = held["measured"], held["predicted"]
    ax.scatter(measured, predicted, s=8, alpha=0.7)
    lo, hi = float(min(measured.min(), predicted.min())), float(max(measured.max(), predicted.max()))
    ax.plot([lo, hi], [lo, hi], color="k", lw=0.8)
    ax.set_xlabel("measured top-1 (%)")
    ax.set_ylabel("predicted top-1 (%)")
    ax.set_title(f"held-out: RMSE {report.rmse:.3f}, Kendall tau {report.tau:.3f}"
                 + (f" (retest {report.retest_tau:.3f})" if report.retest_tau is not None else ""), fontsize=10)
    epochs = [m["epoch"] for m in curve]
    cx.plot(epochs, [m["train_rmse"] for m in curve], label="train")
    cx.plot(epochs, [m["heldout_rmse"] for m in curve], label="held-out")
    cx.axvline(report.best_epoch, color="k", ls=":", lw=0.8, label="kept")
    cx.set_xlabel("epoch")
    cx.set_ylabel("RMSE (top-1 points)")
    cx.set_yscale("log")
    cx.legend()
    fig.tight_layout()
    out = atomic_write(path, lambda p: fig.savefig(p, dpi=110, format="png"))
    plt.close(fig)
    return out
