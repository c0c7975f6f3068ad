"""Training steps through the elastic ops match golden weights recorded before they were optimised.

The golden file holds the state dict after a short seeded SGD run (momentum, Nesterov, weight decay)
that alternates subnets, so channels, kernels and blocks go in and out of use between steps. It was
written by ``_golden_run`` with the plain slicing implementation (commit 916f374, one thread):
``torch.save(_golden_run(), "tests/fixtures/elastic_golden.pt")``. Any faster implementation must
reproduce it to fp32 round-off, including the momentum and weight-decay updates that inactive
channels receive.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from helpers import perturb, tiny_space

from ofa.families.mbv3.encoding import sample_arch
from ofa.families.mbv3.layers import mid_channels
from ofa.families.mbv3.space import SearchSpace, StageSpec
from ofa.families.mbv3.supernet import OFAMobileNetV3

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "elastic_golden.pt"


def _golden_space() -> SearchSpace:
    """The tiny space, narrower so the golden file stays small (every feature is still there)."""
    stages = (StageSpec(8, 2, False, "relu"), StageSpec(12, 1, True, "relu"), StageSpec(16, 2, True, "hswish"))
    return tiny_space(stages=stages, final_expand_width=32, feature_width=32)


def _optimizer(net: torch.nn.Module) -> torch.optim.SGD:
    decay = [p for p in net.parameters() if p.ndim > 1]
    no_decay = [p for p in net.parameters() if p.ndim <= 1]
    return torch.optim.SGD(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=0.002,
        momentum=0.9,
        nesterov=True,
    )


def _golden_run(steps: int = 8) -> dict[str, torch.Tensor]:
    """Largest subnet first (every weight gets momentum), then smaller and mixed subnets.

    A small learning rate and batch 8 keep the run well conditioned: round-off (e.g. one thread vs
    two) stays at round-off size instead of being amplified into different weights.
    """
    torch.manual_seed(0)
    space = _golden_space()
    net = perturb(OFAMobileNetV3(space), seed=0).train()
    opt = _optimizer(net)
    sampled = [sample_arch(space, seed) for seed in range(steps - 3)]
    archs = [space.max_arch(), space.min_arch(), *sampled, space.min_arch()]
    g = torch.Generator().manual_seed(1)
    for arch in archs:
        net.set_active(arch)
        x = torch.randn(8, 3, arch.resolution, arch.resolution, generator=g)
        y = torch.randint(0, space.num_classes, (8,), generator=g)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def test_training_steps_match_the_golden_weights():
    golden = torch.load(GOLDEN, weights_only=True)
    state = _golden_run()
    assert state.keys() == golden.keys()
    for key, value in state.items():
        assert value.dtype == golden[key].dtype, key
        if not value.is_floating_point():
            assert torch.equal(value, golden[key]), key
            continue
        diff, scale = (value - golden[key]).abs().max().item(), golden[key].abs().max().item()
        assert diff <= 1e-5 * scale, (key, diff, scale)  # 1 vs 2 threads differ by < 1e-6 * scale


def test_inactive_channels_get_momentum_and_weight_decay():
    """A channel outside the active slice still moves: its gradient is zero, not absent."""
    torch.manual_seed(0)
    space = _golden_space()
    net = OFAMobileNetV3(space).train()
    block = net.blocks[1][0]
    mid = mid_channels(block.in_channels, min(space.expands))
    opt = _optimizer(net)
    for arch, momentum in ((space.max_arch(), False), (space.min_arch(), True)):
        net.set_active(arch)
        before = block.conv_pw.weight.detach().clone()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(torch.randn(2, 3, arch.resolution, arch.resolution)), torch.zeros(2).long()).backward()
        opt.step()
        assert not torch.equal(block.conv_pw.weight[mid:], before[mid:])
        if momentum:  # inactive: d = buf*0.9 + wd*w, step lr*(wd*w + 0.9*d)
            assert torch.equal(block.conv_pw.weight.grad[mid:], torch.zeros_like(before[mid:]))
            buf = opt.state[block.conv_pw.weight]["momentum_buffer"]
            expected = before[mid:] - 0.002 * (0.1 * before[mid:] + 0.9 * buf[mid:])
            assert torch.allclose(block.conv_pw.weight[mid:], expected, rtol=0, atol=1e-7)
