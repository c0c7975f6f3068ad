"""What many test files share: small spaces and recipes, a known-latency clock, a SIGKILL runner, parity helpers.

A plain module (`from helpers import ...`), so that ``conftest.py`` stays light: pytest's controller process
loads it before any worker starts, and importing torch and the package there cost seconds of every run.
"""

from __future__ import annotations

import gzip
import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F

from ofa.families.mbv3.space import SearchSpace, StageSpec
from ofa.families.resnet.space import ResNetSpace
from ofa.families.resnet.supernet import OFAResNet
from ofa.lut.layer_models import layer_specs
from ofa.lut.timing import Standalone
from ofa.runtime import runtimes
from ofa.train.bn import resize
from ofa.train.checkpoint import CheckpointStore
from search.latency import LatencyTable

TINY_RECIPE = Path(__file__).resolve().parent / "recipes" / "tiny.yaml"  # a few-second synthetic recipe
# OFA-ResNet50's layout at the official fixture's width list, at 32 px: small enough for a step in milliseconds
SMALL_RESNET = ResNetSpace.from_dict({"widths": [0.1, 0.15, 0.2], "num_classes": 10, "resolutions": [32]})


def resnet_after_a_small_step() -> tuple[OFAResNet, torch.Tensor, torch.Tensor]:
    """A seeded `SMALL_RESNET` supernet after one backward of its smallest subnet (its conv gradients are corner
    buffers), and the batch it ran."""
    torch.manual_seed(0)
    net, x, y = OFAResNet(SMALL_RESNET).train(), torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    net.set_active(SMALL_RESNET.min_arch())
    F.cross_entropy(net(x), y).backward()
    return net, x, y


def tiny_space(**overrides) -> SearchSpace:
    """A 3-stage space with every feature of the mbv3 space (SE, both activations, strides, kernels 3/5/7)."""
    base = dict(
        stages=(StageSpec(16, 2, False, "relu"), StageSpec(24, 1, True, "relu"), StageSpec(32, 2, True, "hswish")),
        kernels=(3, 5, 7),
        expands=(2, 3, 4),
        depths=(1, 2, 3),
        resolutions=(12, 16, 20),
        stem_width=8,
        stem_stride=1,
        first_width=8,
        final_expand_width=48,
        feature_width=64,
        in_channels=3,
        num_classes=10,
        dropout=0.1,
    )
    base.update(overrides)
    return SearchSpace(**base)


def perturb(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give BN statistics, affine parameters and kernel transforms non-trivial values.

    Fresh weights hide bugs (identity transforms, unit BN); parity must hold for any weights.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "transforms" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.5 * torch.randn(p.shape, generator=g) + (1.0 if name.endswith("weight") else 0.0))
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
    return module


def scalar_series(folder: Path) -> dict[str, list[float]]:
    """Every scalar curve of the TensorBoard event files in ``folder``, read back with tensorboard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every value
    events.Reload()
    return {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def kill_at_step(cmd: list[str], checkpoints: Path, step: int) -> int:
    """Run ``cmd`` (one thread) and SIGKILL it once a checkpoint of ``step`` or later exists; its exit code."""
    store = CheckpointStore(checkpoints)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            paths = store.paths()
            if paths and int(paths[-1].stem.split("-")[1]) >= step:
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    return proc.returncode


# A protocol for tests that time real models and assert what was measured, not how well: a few short blocks,
# no budget, burn-in or spans.
NO_SPANS = {"budget_s": 0.0, "burn_in_s": 0.0, "span_s": 0.0, "reference_span_s": 0.0, "reference_budget_s": 0.0}
FAST = Standalone(warmup=1, calls=3, blocks=3, block_ms=1.0, **NO_SPANS)


def known_call_ms(monkeypatch: pytest.MonkeyPatch, ms: float) -> None:
    """Every runner's calls still run, but each reads ``ms`` on the wall and the CPU clock: a latency measured
    meanwhile has a known true value, whatever the protocol's statistics. The burn-in's second of untimed calls
    and the least spans are skipped: under this clock no call is slow, so they would only spend real time."""

    def timed_calls(call, calls, cpu_clock=None):
        for _ in range(calls):
            call()
        return np.full(calls, ms), np.full(calls, ms)

    monkeypatch.setattr(runtimes, "_timed_calls", timed_calls)
    monkeypatch.setattr(Standalone, "_burn_in", lambda self, runners: None)
    monkeypatch.setattr(Standalone, "_spanned", lambda self, state: True)
    monkeypatch.setattr(
        Standalone, "_reference_stats", lambda self, ref, state, timed_s: self._stats(state, self.reference_quantile)
    )


def onnx_top1(path: str | Path, images: torch.utils.data.Dataset) -> float:
    """Top-1 (%) of the ONNX file at ``path`` on labelled ``images``, counted here: a plain onnxruntime
    session, one image per call, resized to the model's input as the elastic resolution does."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    spec = session.get_inputs()[0]
    correct = 0
    for x, y in images:
        logits = session.run(None, {spec.name: resize(x[None].float(), spec.shape[-1]).numpy()})[0]
        correct += int(logits[0].argmax() == int(y))
    return 100.0 * correct / len(images)


def synthetic_table(
    space: SearchSpace,
    *,
    dtype: str | None = None,
    batch: int = 1,
    backend: str = "ort-cpu",
    protocol: dict | None = None,
) -> LatencyTable:
    """A latency table for ``space`` with made-up entries (a MAC-proportional cost), for tests whose subject is
    not the timing; ``dtype`` None: a table from before INT8 (float32); ``protocol``: `FAST` unless given."""
    entries = {
        spec.key: {"mean_ms": 1e-6 * spec.macs + 0.01, "std_ms": 0.0, "count": 1}
        for r in space.resolutions
        for spec in layer_specs(space, r)
    }
    meta = {"device": "test-cpu", "backend": backend, "threads": 1, "batch": batch, "overhead_ms": 0.02}
    meta.update(space=space.to_dict(), space_fingerprint=space.fingerprint(), protocol=protocol or FAST.to_dict())
    if dtype:
        meta["dtype"] = dtype
    return LatencyTable(meta, entries, source="synthetic.yaml")


def write_idx(path: Path, array: np.ndarray) -> None:
    """An IDX file of unsigned bytes (gzipped when the name ends in .gz)."""
    body = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    body += array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(body) if path.suffix == ".gz" else body)


def fake_fashion(folder: Path, gz: bool, per_class: tuple[int, int] = (12, 6)) -> dict[str, np.ndarray]:
    """Ten classes of 28x28 images whose brightness encodes the class; returns the arrays written."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    out = {}
    for split, n in zip(("train", "t10k"), per_class):
        labels = np.repeat(np.arange(10), n)
        rng.shuffle(labels)
        images = (labels[:, None, None] * 25 + rng.integers(0, 5, (len(labels), 28, 28))).astype(np.uint8)
        suffix = ".gz" if gz else ""
        write_idx(folder / f"{split}-images-idx3-ubyte{suffix}", images)
        write_idx(folder / f"{split}-labels-idx1-ubyte{suffix}", labels)
        out[split] = images
    return out
