"""A depthwise conv's backward on the CPU: aten's (oneDNN) against `ofa.families.depthwise_grad`'s.

For each shape (batch, channels, size, kernel, stride: the digits supernet's 5×5 blocks and MobileNetV3 /
ProxylessNAS blocks at 128 px), one round times the input and weight gradients both ways, alternating which
goes first, so the machine's noise hits both alike; a shape's figure is the median of its rounds' ratios
(aten / ours: above 1, ours is faster), with the median milliseconds of each beside it. Ours is timed at every
size, though `depthwise_conv2d` takes it only from `FAST_FROM_KERNEL` up: the 3×3 shapes show why.

    python -m bench.depthwise_grad [--rounds 15] [--json]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from bench.step_timing import report
from ofa.families.depthwise_grad import FAST_FROM_KERNEL, DepthwiseConv

SHAPES = [  # (batch, channels, size, kernel, stride)
    (32, 96, 8, 5, 1),  # the digits demo's blocks, one process's half batch
    (32, 32, 16, 5, 2),
    (32, 96, 8, 3, 1),
    (16, 144, 32, 5, 1),  # ImageNet-size blocks at 128 px, batch 16
    (16, 72, 64, 5, 2),
    (16, 144, 32, 7, 1),
    (16, 480, 8, 7, 1),
    (16, 96, 64, 3, 2),
]


def backward_seconds(conv, x: torch.Tensor, weight: torch.Tensor, stride: int, grad: torch.Tensor) -> float:
    """One backward of ``conv`` (both gradients), timed."""
    x, weight = x.detach().requires_grad_(), weight.detach().requires_grad_()
    out = conv(x, weight, stride, weight.shape[-1] // 2)
    start = time.perf_counter()
    out.backward(grad)
    return time.perf_counter() - start


def aten(x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
    return F.conv2d(x, weight, None, stride, padding, 1, weight.shape[0])


def one_shape(shape: tuple[int, ...], rounds: int) -> dict[str, float]:
    batch, channels, size, kernel, stride = shape
    torch.manual_seed(0)
    x, weight = torch.randn(batch, channels, size, size), torch.randn(channels, 1, kernel, kernel)
    grad = torch.randn_like(aten(x, weight, stride, kernel // 2))
    times: dict[str, list[float]] = {"aten": [], "ours": []}
    for r in range(rounds + 1):
        order = ("aten", "ours") if r % 2 else ("ours", "aten")
        for name in order:
            seconds = backward_seconds(aten if name == "aten" else DepthwiseConv.apply, x, weight, stride, grad)
            if r:  # the first round warms both up
                times[name].append(seconds)
    ratios = np.array(times["aten"]) / np.array(times["ours"])
    return {
        "aten_ms": round(float(np.median(times["aten"])) * 1e3, 3),
        "ours_ms": round(float(np.median(times["ours"])) * 1e3, 3),
        "speedup": round(float(np.median(ratios)), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per shape")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    timed = {shape: one_shape(shape, args.rounds) for shape in SHAPES}
    shapes = {"x".join(map(str, shape)): figures for shape, figures in timed.items()}
    fast = [figures["speedup"] for (_, _, _, kernel, _), figures in timed.items() if kernel >= FAST_FROM_KERNEL]
    result = {
        "shapes": "batch x channels x size x kernel x stride",
        **shapes,
        "speedup_min_fast_path": min(fast),
        "threads": torch.get_num_threads(),
    }
    report(result, args.json)


if __name__ == "__main__":
    main()
