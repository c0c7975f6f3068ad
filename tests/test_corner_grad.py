"""`CornerGradient`: a leading slice whose backward reuses one gradient buffer gives the plain slice's
``.grad``, bit for bit, whatever else runs between steps."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ofa.families.corner_grad import CornerGradient
from ofa.families.resnet.encoding import sample_arch
from ofa.families.resnet.space import ResNetSpace
from ofa.families.resnet.supernet import OFAResNet


def plain_slice(self: CornerGradient, weight: nn.Parameter, out_channels: int, in_channels: int) -> torch.Tensor:
    """What the corner replaces: autograd's own slice (a zero-filled full-size gradient per step), made contiguous as
    the corner's forward makes it (a strided weight can round differently in a linear layer on some CPUs)."""
    if weight.shape[:2] == (out_channels, in_channels):
        return weight
    return weight[:out_channels, :in_channels].contiguous()


# Each step: (out, in) corners whose losses are summed in one backward each, then what touches .grad.
STEPS = [
    ([(3, 2)], None),
    ([(3, 2)], None),  # the same corner again: only it is cleared
    ([(5, 4), (2, 6)], None),  # two corners accumulate into one buffer
    ([(8, 6), (2, 2)], None),  # the whole weight (autograd's own gradient), then a corner added into it
    ([(2, 2), (8, 6)], None),  # a corner first, then autograd accumulates the whole weight into the buffer
    ([(4, 3)], "scale"),  # something else writes into the buffer (as clipping does)
    ([(1, 1)], None),
    ([(6, 5)], "keep"),  # the caller keeps .grad (zero_grad(set_to_none=False) then accumulates into it)
    ([(2, 3)], None),
]


def run(steps: list, corner_slice: bool, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    torch.manual_seed(0)
    weight = nn.Parameter(torch.randn(8, 6, 3, 3))
    corner = CornerGradient()
    with monkeypatch.context() as patch:
        if not corner_slice:
            patch.setattr(CornerGradient, "slice", plain_slice)
        grads, keep = [], False
        for corners, then in steps:
            if not keep:
                weight.grad = None
            for o, i in corners:
                x = torch.randn(2, i, 5, 5)
                F.conv2d(x, corner.slice(weight, o, i)).square().sum().backward()
            if then == "scale":
                weight.grad.mul_(0.5)
            keep = then == "keep"
            grads.append(weight.grad.clone())
    return grads


def test_the_gradient_is_the_plain_slices_bit_for_bit(monkeypatch):
    for step, (mine, plain) in enumerate(zip(run(STEPS, True, monkeypatch), run(STEPS, False, monkeypatch))):
        assert torch.equal(mine, plain), f"step {step}: {(mine - plain).abs().max()}"


def test_only_the_written_corner_is_nonzero_and_the_buffer_is_reused(monkeypatch):
    weight, corner = nn.Parameter(torch.randn(8, 6, 1, 1)), CornerGradient()
    F.conv2d(torch.randn(1, 6, 2, 2), corner.slice(weight, 5, 6)).sum().backward()
    first = weight.grad
    weight.grad = None
    F.conv2d(torch.randn(1, 2, 2, 2), corner.slice(weight, 3, 2)).sum().backward()
    assert weight.grad is first  # no new full-size tensor
    assert weight.grad[:3, :2].abs().sum() > 0
    assert not weight.grad[3:].any() and not weight.grad[:, 2:].any()  # the last step's wider corner is cleared


def test_without_gradients_the_slice_is_a_view_and_nothing_is_kept():
    weight, corner = nn.Parameter(torch.randn(8, 6, 1, 1)), CornerGradient()
    with torch.no_grad():
        view = corner.slice(weight, 4, 3)
    assert view.data_ptr() == weight.data_ptr() and corner.buffer is None
    assert corner.slice(weight, 8, 6) is weight


def test_resnet_supernet_gradients_match_plain_slicing(monkeypatch):
    """Whole training steps of the supernet (sandwich-like mixes of subnets, gradient clipping between)."""
    space = ResNetSpace.from_dict({"widths": [0.1, 0.15, 0.2], "num_classes": 10, "resolutions": [32]})
    torch.manual_seed(0)
    nets = {True: OFAResNet(space).train()}
    nets[False] = copy.deepcopy(nets[True])
    archs = [sample_arch(space, seed) for seed in range(4)] + [space.min_arch(), space.max_arch()]
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    plan = [[4], [4], [0, 4], [5, 4], [4, 5], [1], [2, 3], [4]]
    grads = {}
    for corner_slice, net in nets.items():
        with monkeypatch.context() as patch:
            if not corner_slice:
                patch.setattr(CornerGradient, "slice", plain_slice)
            grads[corner_slice] = []
            for step, members in enumerate(plan):
                net.zero_grad(set_to_none=True)
                for a in members:
                    net.set_active(archs[a])
                    F.cross_entropy(net(x), y).backward()
                if step == 5:
                    torch.nn.utils.clip_grad_norm_(net.parameters(), 0.1)
                grads[corner_slice].append({n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None})
    for step, (mine, plain) in enumerate(zip(grads[True], grads[False])):
        assert mine.keys() == plain.keys(), f"step {step}"
        assert all(torch.equal(mine[n], plain[n]) for n in mine), f"step {step}"
