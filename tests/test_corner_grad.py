"""`CornerGradient`: a leading slice whose backward reuses one gradient buffer gives the plain slice's
``.grad``, bit for bit, whatever else runs between steps."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from helpers import SMALL_RESNET, resnet_after_a_small_step
from torch import nn

from ofa.families.corner_grad import POOL_SIZE, CornerGradient, writes_keeping_zeros
from ofa.families.resnet.encoding import sample_arch
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
    ([(4, 3)], "scale"),  # something else writes into the buffer (as a hook might)
    ([(3, 3)], "scale, keeping zeros"),  # as clipping and the average over ranks do
    ([(2, 2)], None),
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
            elif then == "scale, keeping zeros":
                with writes_keeping_zeros([weight.grad]):
                    weight.grad.mul_(0.5)
            keep = then == "keep"
            grads.append(weight.grad.clone())
    return grads


def test_the_gradient_is_the_plain_slices_bit_for_bit(monkeypatch):
    for step, (mine, plain) in enumerate(zip(run(STEPS, True, monkeypatch), run(STEPS, False, monkeypatch))):
        assert torch.equal(mine, plain), f"step {step}: {(mine - plain).abs().max()}"


def test_a_step_takes_the_pooled_buffer_with_least_to_clear_and_clears_only_that():
    weight, corner = nn.Parameter(torch.randn(8, 6, 1, 1)), CornerGradient()

    def step(out_channels: int, in_channels: int) -> torch.Tensor:
        weight.grad = None
        x = torch.randn(1, in_channels, 2, 2)
        F.conv2d(x, corner.slice(weight, out_channels, in_channels)).sum().backward()
        assert weight.grad[:out_channels, :in_channels].abs().sum() > 0
        assert not weight.grad[out_channels:].any() and not weight.grad[:, in_channels:].any()
        return weight.grad

    wide = step(5, 6)
    narrow = step(3, 2)  # the wide buffer would need clearing and the pool has room: a second one
    assert narrow is not wide and len(corner.buffers) == POOL_SIZE == 2
    assert step(3, 2) is narrow  # nothing to clear in it
    assert step(4, 4) is narrow  # it holds less outside (4, 4) than the wide one
    assert step(6, 6) is wide  # (5, 6) lies inside (6, 6): nothing to clear
    assert step(2, 1) is narrow and len(corner.buffers) == 2  # the pool is full: the one with least to clear


def test_writes_that_keep_zeros_leave_the_buffer_tracked_and_others_do_not():
    weight, corner = nn.Parameter(torch.randn(8, 6, 1, 1)), CornerGradient()
    for keep in (True, False):
        weight.grad = None
        F.conv2d(torch.randn(1, 3, 2, 2), corner.slice(weight, 4, 3)).sum().backward()
        if keep:
            with writes_keeping_zeros([weight.grad, torch.zeros(2)]):  # tensors that are no buffer: passed over
                weight.grad.mul_(0.5)
        else:
            weight.grad.mul_(0.5)
        assert weight.grad.corner_buffer.written_elsewhere() is not keep
        assert weight.grad.corner_buffer.to_clear(2, 2) == (4 * 3 - 2 * 2 if keep else 8 * 6)


def test_without_gradients_the_slice_is_a_view_and_nothing_is_kept():
    weight, corner = nn.Parameter(torch.randn(8, 6, 1, 1)), CornerGradient()
    with torch.no_grad():
        view = corner.slice(weight, 4, 3)
    assert view.data_ptr() == weight.data_ptr() and corner.buffers == []
    assert corner.slice(weight, 8, 6) is weight


def test_a_weight_given_new_storage_or_dtype_is_sliced_and_buffered_afresh():
    weight, corner = nn.Parameter(torch.randn(8, 6, 1, 1)), CornerGradient()
    F.conv2d(torch.randn(1, 3, 2, 2), corner.slice(weight, 4, 3)).sum().backward()
    weight.data, weight.grad = torch.randn(8, 6, 1, 1, dtype=torch.float64), None  # as a move to float64 does
    x = torch.randn(1, 3, 2, 2, dtype=torch.float64)
    sliced = corner.slice(weight, 4, 3)
    assert torch.equal(sliced, weight[:4, :3])  # the new values, not a view of the old storage
    F.conv2d(x, sliced).sum().backward()
    assert weight.grad.dtype == torch.float64 and len(corner.buffers) == 1
    expected = torch.zeros_like(weight)
    expected[:4, :3] = torch.autograd.grad(F.conv2d(x, weight[:4, :3]).sum(), weight)[0][:4, :3]
    assert torch.equal(weight.grad, expected)


def test_a_copy_of_the_network_holds_no_buffers_and_trains_alike():
    net, x, y = resnet_after_a_small_step()
    net.zero_grad(set_to_none=True)
    twin = net.copy()
    corners = [m.corner for m in twin.modules() if isinstance(getattr(m, "corner", None), CornerGradient)]
    assert len(corners) > 10 and all(not c.buffers and not c.weight_views for c in corners)
    for model in (net, twin):
        F.cross_entropy(model(x), y).backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(net.parameters(), twin.parameters()) if a.grad is not None)


def test_resnet_supernet_gradients_match_plain_slicing(monkeypatch):
    """Whole training steps of the supernet (sandwich-like mixes of subnets, gradient clipping between)."""
    space = SMALL_RESNET
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
