"""`depthwise_conv2d`: the CPU path that computes a depthwise conv's gradients as forward convolutions gives
autograd's own gradients, for every kernel, stride and size the families use, alone and inside a supernet."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import perturb, tiny_space

from ofa.families import depthwise_grad
from ofa.families.depthwise_grad import depthwise_conv2d
from ofa.families.mbv3.encoding import sample_arch
from ofa.families.mbv3.supernet import OFAMobileNetV3


def gradients(x: torch.Tensor, weight: torch.Tensor, stride: int, conv) -> tuple[torch.Tensor, ...]:
    x, weight = x.clone().requires_grad_(), weight.clone().requires_grad_()
    out = conv(x, weight, stride, weight.shape[-1] // 2)
    torch.manual_seed(1)
    (out * torch.randn_like(out)).sum().backward()
    return out.detach(), x.grad, weight.grad


def plain(x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
    return F.conv2d(x, weight, None, stride, padding, 1, weight.shape[0])


@pytest.mark.parametrize("kernel", [5, 7])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("size", [7, 8, 16])
def test_gradients_equal_autograds_own(kernel, stride, size):
    torch.manual_seed(0)
    x = torch.randn(3, 10, size, size, dtype=torch.float64)[:, 2:8]  # a channel slice: not contiguous
    weight = torch.randn(6, 1, kernel, kernel, dtype=torch.float64)
    mine, theirs = gradients(x, weight, stride, depthwise_conv2d), gradients(x, weight, stride, plain)
    for name, a, b in zip(("output", "input gradient", "weight gradient"), mine, theirs):
        assert a.shape == b.shape, name
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)


def test_the_fast_path_runs_only_where_it_is_faster():
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    assert type(depthwise_conv2d(x, torch.randn(4, 1, 5, 5), 1, 2).grad_fn).__name__ == "DepthwiseConvBackward"
    assert "Convolution" in type(depthwise_conv2d(x, torch.randn(4, 1, 3, 3), 1, 1).grad_fn).__name__
    with torch.no_grad():
        assert depthwise_conv2d(x, torch.randn(4, 1, 5, 5), 1, 2).grad_fn is None
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the backward would not see autocast's dtypes
        out = depthwise_conv2d(x, torch.randn(4, 1, 5, 5), 1, 2)
    assert out.dtype == torch.bfloat16 and "Convolution" in type(out.grad_fn).__name__


def test_a_supernet_step_has_the_plain_convolutions_gradients(monkeypatch):
    """Every parameter's gradient of the mbv3 supernet (kernels 3/5/7, strides 1/2, elastic kernels through
    their transforms) over several random subnets, against the same step with autograd's own convolution."""
    space = tiny_space()
    rng = np.random.default_rng(0)
    archs = [space.max_arch(16), *(sample_arch(space, rng) for _ in range(4))]

    def grads(fast: bool) -> dict[str, torch.Tensor]:
        torch.manual_seed(3)
        net = perturb(OFAMobileNetV3(space), seed=2).double().train()
        with monkeypatch.context() as patch:
            if not fast:
                patch.setattr(depthwise_grad, "FAST_FROM_KERNEL", 99)
            for arch in archs:
                net.set_active(arch)
                x = torch.randn(4, 3, arch.resolution, arch.resolution, dtype=torch.float64)
                F.cross_entropy(net(x), torch.arange(4)).backward()
        return {n: p.grad for n, p in net.named_parameters() if p.grad is not None}

    fast, slow = grads(True), grads(False)
    assert fast.keys() == slow.keys() and any("conv_dw" in n for n in fast)
    for name in fast:
        torch.testing.assert_close(
            fast[name], slow[name], rtol=1e-10, atol=1e-12, msg=lambda m, name=name: f"{name}: {m}"
        )
