"""``optimizer.update: used`` (`UsedWeightsSGD`): torch's SGD on the region of each weight a step used, the rest
left as it is; the same weights bit for bit where a step uses everything (a sandwich's largest subnet)."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from helpers import SMALL_RESNET, tiny_space

from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.families.resnet.encoding import sample_arch
from ofa.families.resnet.supernet import OFAResNet
from ofa.train.optim import build_optimizer
from ofa.train.ps_step import gradient_norm
from ofa.train.recipe import OptimizerConfig, load_recipe
from ofa.train.used_sgd import UsedWeightsSGD
from ofa.utils.errors import OFAError

CFG = OptimizerConfig(momentum=0.9, nesterov=True, weight_decay=1e-2)  # decay large enough to show where it acts
USED = replace(CFG, update="used")


def twins() -> tuple[OFAResNet, OFAResNet]:
    torch.manual_seed(0)
    net = OFAResNet(SMALL_RESNET).train()
    return net, copy.deepcopy(net)


def step(net: OFAResNet, optimizer: torch.optim.Optimizer, archs: list, x: torch.Tensor, y: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    for arch in archs:
        net.set_active(arch)
        F.cross_entropy(net(x), y).backward()
    optimizer.step()


def assert_same(a: OFAResNet, b: OFAResNet) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name


def test_sandwich_steps_train_the_same_weights_as_torch_sgd():
    (plain, used), x, y = twins(), torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    opts = build_optimizer(plain, CFG, 0.1), build_optimizer(used, USED, 0.1)
    assert type(opts[0]) is torch.optim.SGD and isinstance(opts[1], UsedWeightsSGD)
    small = [SMALL_RESNET.min_arch(), sample_arch(SMALL_RESNET, 3)]
    for _ in range(3):
        for net, opt in zip((plain, used), opts):
            step(net, opt, [SMALL_RESNET.max_arch(), *small], x, y)
    assert_same(plain, used)
    for p, q in zip(plain.parameters(), used.parameters()):
        assert torch.equal(opts[0].state[p]["momentum_buffer"], opts[1].state[q]["momentum_buffer"])


@pytest.mark.parametrize("clip", [False, True])
def test_a_small_subnet_moves_only_what_it_used(clip):
    """The regions are read off the forward: clipping (or an all-reduce) writing into the gradients in place
    leaves them as they are."""
    (plain, used), x, y = twins(), torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    opts = build_optimizer(plain, CFG, 0.1), build_optimizer(used, USED, 0.1)
    for net, opt in zip((plain, used), opts):
        step(net, opt, [SMALL_RESNET.max_arch()], x, y)  # momentum everywhere
    before = copy.deepcopy(used)
    for net, opt in zip((plain, used), opts):
        opt.zero_grad(set_to_none=True)
        net.set_active(SMALL_RESNET.min_arch())
        F.cross_entropy(net(x), y).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1e-3)
        opt.step()
    conv = used.stem.conv3  # the stem's output conv: the smallest subnet uses a corner of it
    rows, cols = conv.conv.weight.grad.corner_buffer.dirty
    w, w0, w_plain = conv.conv.weight, before.stem.conv3.conv.weight, plain.stem.conv3.conv.weight
    assert (rows, cols) < tuple(w.shape[:2])
    assert torch.equal(w[rows:], w0[rows:]) and torch.equal(w[:, cols:], w0[:, cols:])  # unused: as it was
    assert not torch.equal(w_plain[rows:], w0[rows:])  # torch's SGD moved them (momentum, decay)
    assert torch.equal(w[:rows, :cols], w_plain[:rows, :cols])  # used: torch's update exactly
    assert not torch.equal(w[:rows, :cols], w0[:rows, :cols])
    bn, bn0 = conv.bn, before.stem.conv3.bn
    assert torch.equal(bn.weight[rows:], bn0.weight[rows:]) and not torch.equal(bn.weight[:rows], bn0.weight[:rows])
    fc, fc0, fc_cols = used.head.fc.weight, before.head.fc.weight, used.head.fc.weight.grad.corner_buffer.dirty[1]
    assert torch.equal(fc[:, fc_cols:], fc0[:, fc_cols:]) and not torch.equal(fc[:, :fc_cols], fc0[:, :fc_cols])


def test_forwards_without_autograd_are_not_counted_and_each_step_starts_afresh():
    (_, used), x, y = twins(), torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    opt = build_optimizer(used, USED, 0.1)
    with torch.no_grad():
        used.set_active(SMALL_RESNET.max_arch())
        used(x)  # an evaluation: no weight of it is updated
    step(used, opt, [SMALL_RESNET.min_arch()], x, y)
    assert used.stem.conv3.corner.used == (0, 0)  # taken by the step
    before = copy.deepcopy(used)
    step(used, opt, [SMALL_RESNET.min_arch()], x, y)
    w, w0 = used.stem.conv3.conv.weight, before.stem.conv3.conv.weight
    rows = used.stem.conv3.conv.weight.grad.corner_buffer.dirty[0]
    assert rows < w.shape[0] and torch.equal(w[rows:], w0[rows:])


def test_a_checkpointed_state_loads_into_either_optimizer():
    (plain, used), x, y = twins(), torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    opt = build_optimizer(used, USED, 0.1)
    step(used, opt, [SMALL_RESNET.min_arch()], x, y)
    other = build_optimizer(plain, CFG, 0.1)
    other.load_state_dict(opt.state_dict())
    assert other.state_dict()["state"][0]["momentum_buffer"].shape == next(plain.parameters()).shape


def test_a_model_that_records_no_regions_is_refused():
    net = OFAMobileNetV3(tiny_space())
    with pytest.raises(OFAError, match=r"optimizer.update: used needs .*OFAMobileNetV3 records none"):
        build_optimizer(net, USED, 0.1)


def test_recipe_key_defaults_keep_the_digest_and_adamw_is_refused():
    recipe = "recipes/digits_resnet.yaml"  # the ResNet recipes set update: used
    assert load_recipe(recipe).to_dict()["optimizer"]["update"] == "used"
    assert "update" not in load_recipe(recipe, ["optimizer.update=all"]).to_dict()["optimizer"]
    with pytest.raises(OFAError, match=r"optimizer.update: used is for sgd \(got optimizer.name: adamw\)"):
        load_recipe(recipe, ["optimizer.update=used", "optimizer.name=adamw"])
    with pytest.raises(OFAError, match=r"optimizer.update"):
        load_recipe(recipe, ["optimizer.update=some"])


def test_the_gradient_norm_without_clipping_leaves_the_gradients_unwritten():
    params = [torch.nn.Parameter(torch.zeros(s)) for s in [(6, 4, 3, 3), (9,), (3, 7)]]
    for p in params:
        p.grad = torch.randn_like(p)
    versions = [p.grad._version for p in params]
    norm = gradient_norm(params, None)
    assert [p.grad._version for p in params] == versions
    assert norm == float(torch.nn.utils.clip_grad_norm_(params, math.inf))
    assert gradient_norm(params, 1e-3) == pytest.approx(norm)  # clipped: the norm before clipping
    assert float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))) == pytest.approx(1e-3)


def test_clipping_in_the_step_keeps_the_corner_gradients_tracked():
    (_, net), x, y = twins(), torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    net.set_active(SMALL_RESNET.min_arch())
    F.cross_entropy(net(x), y).backward()
    gradient_norm(list(net.parameters()), 1e-3)
    conv = net.stem.conv3
    buffer = conv.conv.weight.grad.corner_buffer
    assert buffer in conv.corner.buffers and not buffer.written_elsewhere()


def test_a_closure_runs_first_and_its_forward_counts():
    (plain, used), x, y = twins(), torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    opts = build_optimizer(plain, CFG, 0.1), build_optimizer(used, USED, 0.1)
    before, losses = copy.deepcopy(used), []
    for net, opt in zip((plain, used), opts):
        net.set_active(SMALL_RESNET.min_arch())

        def closure(net=net, opt=opt) -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            return loss

        losses.append(opt.step(closure))
    assert torch.equal(losses[0], losses[1])
    w, w0, w_plain = used.stem.conv3.conv.weight, before.stem.conv3.conv.weight, plain.stem.conv3.conv.weight
    rows, cols = used.stem.conv3.conv.weight.grad.corner_buffer.dirty
    assert torch.equal(w[:rows, :cols], w_plain[:rows, :cols]) and not torch.equal(w[:rows, :cols], w0[:rows, :cols])
    assert torch.equal(w[rows:], w0[rows:])  # the closure's forward was the step's: only its corner moved
