"""Accuracy predictor: an MLP on the paper's arch encoding, so the search never runs the supernet.

The features are the family's ``ArchEncoder`` (mbv3: OFA's MobileNetArchEncoder) of integer gene rows,
so a whole population is scored with one batched call. A predictor file stores its space, so it
refuses any other space, and the dtype of the top-1 it predicts (``float32``, or ``int8``: after post-training
quantization), so an INT8 search refuses a float32 predictor. An INT8 predictor fitted on the drop from
float32 holds the float32 predictor as its ``base`` and learns the INT8 top-1 minus the base's prediction.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import kendalltau
from torch import nn
from torch.nn import functional as F

from ofa.families.family import Arch, Space
from ofa.families.registry import family_of, space_from_dict
from ofa.utils.errors import OFAError
from ofa.utils.io import load_torch, save_torch

PREDICTOR_FORMAT = "ofa-predictor"
SMALL_BATCH = 1024  # rows predicted on one thread


class AccuracyPredictor(nn.Module):
    """MLP (hidden ReLU layers, as OFA's 3 x 400) from the encoding to top-1 accuracy in percent."""

    def __init__(
        self,
        space: Space,
        hidden: int = 400,
        layers: int = 3,
        target_mean: float = 0.0,
        target_std: float = 1.0,
        dtype: str = "float32",
        base: AccuracyPredictor | None = None,
    ) -> None:
        super().__init__()
        self.dtype, self.base = dtype, base  # base: predicted_top1 = base's + this MLP's (a drop: negative)
        self.space, self.encoder = space, family_of(space).encoder(space)
        self.hidden, self.layers = hidden, layers
        dims = [self.encoder.dim] + [hidden] * layers
        mods: list[nn.Module] = []
        for a, b in itertools.pairwise(dims):
            mods += [nn.Linear(a, b), nn.ReLU()]
        self.mlp = nn.Sequential(*mods, nn.Linear(dims[-1], 1))
        self.register_buffer("target_mean", torch.tensor(float(target_mean)))
        self.register_buffer("target_std", torch.tensor(float(target_std)))
        self.metrics: dict[str, Any] = {}
        self.source = "the accuracy predictor"  # its file, once loaded: errors name it

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Normalised output; ``predict_*`` map it back to percent."""
        return self.mlp(features).squeeze(-1)

    @torch.inference_mode()
    def predict_batch(self, rows: np.ndarray) -> np.ndarray:
        """Predicted top-1 (percent) of a population of gene rows: one batched call.

        A search population is small: one thread is faster than waking a pool for each layer, and the
        layers are applied directly (`_mlp`), without a module call per layer (a search makes 500).
        """
        x = torch.from_numpy(self.encoder.encode_rows(rows))
        threads = torch.get_num_threads()
        if len(x) <= SMALL_BATCH:
            torch.set_num_threads(1)
        try:
            own = self._mlp(x).mul_(self.target_std).add_(self.target_mean).double().numpy()
        finally:
            torch.set_num_threads(threads)
        return own if self.base is None else own + self.base.predict_batch(rows)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        """``forward`` without autograd or module hooks: linear layers with in-place ReLUs between them."""
        *hidden, last = (m for m in self.mlp if isinstance(m, nn.Linear))
        for layer in hidden:
            x = F.linear(x, layer.weight, layer.bias).relu_()
        return F.linear(x, last.weight, last.bias).squeeze(-1)

    def predict_archs(self, archs: Sequence[Arch]) -> np.ndarray:
        return self.predict_batch(self.encoder.layout.encode_many(list(archs)))

    def predict(self, arch: Arch) -> float:
        return float(self.predict_archs([arch])[0])

    def check_space(self, space: Space, what: str) -> None:
        """Refuse to score archs of another space (the encoding would silently mean something else)."""
        if space.fingerprint() != self.space.fingerprint():
            raise OFAError(
                f"the predictor was fitted on space {self.space.fingerprint()}, but {what} has space "
                f"{space.fingerprint()}: collect and fit a predictor for this supernet"
            )

    def save(self, path: str | Path) -> Path:
        shape = {"hidden": self.hidden, "layers": self.layers}
        return save_torch(
            path,
            {
                "format": PREDICTOR_FORMAT,
                "space": self.space.to_dict(),
                "fingerprint": self.space.fingerprint(),
                **shape,
                "dtype": self.dtype,
                "base": {"hidden": self.base.hidden, "layers": self.base.layers} if self.base is not None else None,
                "state_dict": self.state_dict(),
                "metrics": json.loads(json.dumps(self.metrics)),
            },
        )

    @classmethod
    def load(cls, path: str | Path) -> AccuracyPredictor:
        obj = load_torch(path, "accuracy predictor")
        if obj.get("format") != PREDICTOR_FORMAT:
            raise OFAError(
                f"{path}: not an accuracy predictor (format={obj.get('format')!r}); make one with `ofa predictor fit`"
            )
        missing = [k for k in ("space", "hidden", "layers", "state_dict") if k not in obj]
        if missing:
            raise OFAError(
                f"{path}: accuracy predictor file lacks {missing[0]!r} (damaged or hand-made); "
                "fit it again with `ofa predictor fit`"
            )
        space = space_from_dict(obj["space"], f"{path}:space")
        if space.fingerprint() != obj.get("fingerprint"):
            raise OFAError(f"{path}: stored space does not match its fingerprint (file edited or corrupted)")
        base = obj.get("base")
        dtype = str(obj.get("dtype") or "float32")  # predictors from before INT8 name none
        shape = (int(base["hidden"]), int(base["layers"])) if isinstance(base, dict) else None
        net = cls(space, int(obj["hidden"]), int(obj["layers"]), dtype=dtype, base=shape and cls(space, *shape))
        try:
            net.load_state_dict(obj["state_dict"])
        except (RuntimeError, KeyError) as exc:
            raise OFAError(
                f"{path}: weights do not fit the stored predictor shape: {str(exc).splitlines()[0]}"
            ) from None
        net.metrics, net.source = dict(obj.get("metrics") or {}), str(path)
        return net.eval()


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Rank agreement in [-1, 1] (tau-b, ties allowed); nan for fewer than two points."""
    if len(a) < 2:
        return float("nan")
    return float(kendalltau(a, b).statistic)
