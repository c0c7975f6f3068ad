"""Verification of an exported model: onnxruntime vs PyTorch parity, and the ONNX model's own accuracy."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset
from tqdm import tqdm

from ofa.runtime.formats import FormatModel
from ofa.runtime.runtimes import OrtModel
from ofa.train.bn import resize
from ofa.utils.errors import OFAError

PARITY_ATOL = 1e-4  # max |logit diff| allowed on logits of order one
PARITY_RTOL = 1e-5  # float32 rounding grows with the logits: each unit of max |logit| allows this much more
Inference = OrtModel | FormatModel  # an exported model on its runtime, run on any number of inputs


class ParityError(OFAError):
    """onnxruntime and PyTorch disagree on the exported model: the file is not written."""


@dataclass(frozen=True)
class Parity:
    """onnxruntime vs the static PyTorch model on the same inputs."""

    max_abs_diff: float
    allowed: float  # `parity_tolerance` of the PyTorch logits
    top1_agreement: float  # fraction of inputs whose top-1 class is identical
    real_inputs: int
    random_inputs: int
    batch_sizes: tuple[int, ...]

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.allowed and self.top1_agreement == 1.0


def resized_batches(
    loader: Iterable, resolution: int, limit: int | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(images at ``resolution``, labels) batches, stopping after ``limit`` images."""
    seen = 0
    for x, y in loader:
        if limit is not None and seen >= limit:
            return
        if limit is not None:
            x, y = x[: limit - seen], y[: limit - seen]
        seen += len(x)
        yield resize(x.float(), resolution), y


def eval_split(data: Any) -> Dataset | None:
    """The labelled split that measures an export: test, else validation, else none."""
    for name in ("test", "val"):
        split = getattr(data, name, None)
        if split is not None and len(split) > 0:
            return split
    return None


def parity_tolerance(expected: np.ndarray) -> float:
    """Max |logit diff| allowed against these reference logits: `PARITY_ATOL` + `PARITY_RTOL` × max |logit|.

    A fixed bound fails a correct export whose logits are large (runtimes sum in other orders, and
    float32 rounding scales with the values); a wrong one (a missed BN fold, a bad resize) is off by
    far more than either term.
    """
    return PARITY_ATOL + PARITY_RTOL * float(np.abs(expected).max(initial=0.0))


@torch.no_grad()
def check_parity(
    model: nn.Module, runner: Inference, real: torch.Tensor, random: torch.Tensor, progress: bool = False
) -> Parity:
    """Same inputs through PyTorch and the exported model on its runtime: max |logit diff|, top-1 agreement.

    A dynamic-batch model is run as one batch, in batches of 3 and one input at a time, so the
    batch dimension is exercised too; ``progress`` shows a bar over those passes.
    """
    x = torch.cat([real, random]).float()
    expected = model.eval()(x).numpy()
    chunks = [runner.batch] if runner.batch else [len(x), 3, 1]
    diff, agree = 0.0, 1.0
    for chunk in tqdm(chunks, desc="parity", unit="pass", disable=not progress, leave=False):
        got = runner(x.numpy(), chunk=chunk)
        diff = max(diff, float(np.abs(got - expected).max()))
        agree = min(agree, float((got.argmax(1) == expected.argmax(1)).mean()))
    sizes = {runner.batch} if runner.batch else {min(c, len(x) - i) for c in chunks for i in range(0, len(x), c)}
    return Parity(diff, parity_tolerance(expected), agree, len(real), len(random), tuple(sorted(sizes)))


def onnx_accuracy(
    runner: Inference, loader: Iterable, resolution: int, progress: bool = False, desc: str = "accuracy"
) -> tuple[float, np.ndarray]:
    """Top-1 (percent) of an ONNX model over a labelled loader, and its predictions."""
    correct, total, preds = 0, 0, []
    for x, y in tqdm(resized_batches(loader, resolution), desc=desc, disable=not progress, leave=False):
        pred = runner(x.numpy()).argmax(1)
        preds.append(pred)
        correct += int((pred == y.numpy()).sum())
        total += len(y)
    return 100.0 * correct / max(total, 1), np.concatenate(preds) if preds else np.zeros(0, np.int64)
