import copy
import itertools
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import perturb, tiny_space

from ofa.families.mbv3.elastic import kernel_matrices
from ofa.families.mbv3.encoding import sample_arch
from ofa.families.mbv3.layers import mid_channels
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.families.subnet_file import load_subnet, save_subnet
from ofa.train.bn import recalibrate_bn
from ofa.train.distributed import DistEnv
from ofa.train.ps_report import evaluate_subnets
from ofa.utils.errors import OFAError


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return perturb(OFAMobileNetV3(tiny_space())).eval()


def _parity(net, arch, batch=3, seed=0):
    net.set_active(arch)
    x = torch.randn(
        batch, net.space.in_channels, arch.resolution, arch.resolution, generator=torch.Generator().manual_seed(seed)
    )
    static = net.extract().eval()
    with torch.no_grad():
        return (net(x) - static(x)).abs().max().item(), net(x).abs().max().item()


def test_extract_parity_many_archs(net):
    space = net.space
    archs = [space.max_arch(r) for r in space.resolutions] + [space.min_arch(r) for r in space.resolutions]
    archs += [sample_arch(space, seed) for seed in range(30)]
    for arch in archs:
        diff, scale = _parity(net, arch)
        assert scale > 0.1
        assert diff <= 1e-5, (arch, diff)


def test_extract_parity_mbv3():
    torch.manual_seed(1)
    space = replace(SearchSpace.mbv3(), num_classes=20)
    net = perturb(OFAMobileNetV3(space), seed=1).eval()
    for arch in (space.max_arch(128), space.min_arch(160), sample_arch(space, 3)):
        arch = type(arch)(min(arch.resolution, 160), arch.depths, arch.kernels, arch.expands)
        diff, _ = _parity(net, arch, batch=2)
        assert diff <= 1e-5


def test_extracted_model_is_a_plain_timm_model_with_the_arch_size(net):
    from timm.models.mobilenetv3 import MobileNetV3

    arch, active = sample_arch(net.space, 11), sample_arch(net.space, 12)
    net.set_active(active)
    static = net.extract(arch)
    assert isinstance(static, MobileNetV3)
    assert sum(p.numel() for p in static.parameters()) == net.space.params(arch)
    assert net.active_arch == active  # extract leaves the active subnet as it was


def test_small_kernels_use_the_transformation_matrices(net):
    arch = net.space.min_arch()
    block = net.blocks[1][0]
    w3 = block.conv_dw.active_weight(8, 3)
    centre = block.conv_dw.weight[:8, :, 2:5, 2:5]
    assert w3.shape == (8, 1, 3, 3) and not torch.allclose(w3, centre)  # transforms are learned, not a crop
    fresh = OFAMobileNetV3(net.space)
    fresh_block = fresh.blocks[1][0]
    assert torch.equal(fresh_block.conv_dw.active_weight(8, 3), fresh_block.conv_dw.weight[:8, :, 2:5, 2:5])
    assert _parity(net, arch)[0] <= 1e-5


def _crop_then_transform(conv, channels: int, kernel: int) -> torch.Tensor:
    """The official OFA chain: centre crop of the next larger kernel, then its k²×k² transform, 7→5→3."""
    weight, size = conv.weight[:channels], conv.kernels[0]
    for small in conv.kernels[1:]:
        if kernel > small:
            break
        start = (size - small) // 2
        crop = weight[:, :, start : start + small, start : start + small].reshape(channels, -1)
        weight = F.linear(crop, conv.transforms[f"{size}to{small}"]).view(channels, 1, small, small)
        size = small
    return weight


def test_kernel_matrices_built_together_equal_the_crop_then_transform_chain():
    """The supernet builds every active block's kernel matrix in one batched chain; each must give the
    official chain's kernel, whichever other convs (and kernel sizes) share the batch."""
    net = perturb(OFAMobileNetV3(tiny_space()), seed=3)
    convs = [block.conv_dw for stage in net.blocks[1:-1] for block in stage]
    kernels = [(3, 5, 7, 3, 3, 5)[i % 6] for i in range(len(convs))]
    together = kernel_matrices(convs, kernels)
    for (conv, kernel, matrix), part in itertools.product(zip(convs, kernels, together), (1, 2)):
        channels = conv.weight.shape[0] // part  # all channels, and a prefix
        alone = conv.active_weight(channels, kernel)
        expected = _crop_then_transform(conv, channels, kernel)
        if kernel == conv.kernels[0]:
            assert matrix is None and torch.equal(alone, expected)
            continue
        assert matrix.shape == (conv.kernels[0] ** 2, kernel**2)
        assert torch.allclose(conv.active_weight(channels, kernel, matrix), expected, rtol=0, atol=1e-6)
        assert torch.allclose(alone, expected, rtol=0, atol=1e-6)
    sum(m.sum() for m in together if m is not None).backward()
    for conv, kernel in zip(convs, kernels):  # gradients reach the transforms on each chain, and only those
        for name, transform in conv.transforms.items():
            used = int(name.split("to")[1]) >= kernel
            assert (transform.grad is not None and transform.grad.abs().sum() > 0) == used, (name, kernel)


def test_blocks_given_tensors_built_up_front_run_as_blocks_slicing_their_own():
    """The supernet builds every active block's tensors before the first block runs; outputs, gradients
    and running statistics are bitwise those of blocks that slice their own tensors as they run."""
    up_front = perturb(OFAMobileNetV3(tiny_space()), seed=5).train()
    own = copy.deepcopy(up_front)
    arch = sample_arch(up_front.space, 4)
    x = torch.randn(3, 3, arch.resolution, arch.resolution, generator=torch.Generator().manual_seed(1))
    outputs = []
    for net in (up_front, own):
        net.set_active(arch)
        torch.manual_seed(2)  # the classifier's dropout
        if net is up_front:
            out = net(x)
        else:
            h = net.blocks[0](net.bn1(net.conv_stem(x)))
            for block in net.active_blocks():
                h = block(h)
            h = net.flatten(net.act2(net.conv_head(net.global_pool(net.blocks[-1](h)))))
            out = net.classifier(net.dropout(h))
        out.square().sum().backward()
        outputs.append(out)
    assert torch.equal(outputs[0], outputs[1])
    for (name, a), b in zip(up_front.state_dict().items(), own.state_dict().values()):
        assert torch.equal(a, b), name
    for (name, a), b in zip(up_front.named_parameters(), own.parameters()):
        assert (a.grad is None) == (b.grad is None), name
        assert a.grad is None or torch.equal(a.grad, b.grad), name


def test_active_tensors_are_views_where_the_convolution_takes_them_as_they_are():
    """Prefix slices share the supernet's storage (batch-norm statistics update in place); the projection's
    column slice is a contiguous copy, as a convolution wants its weight."""
    net = OFAMobileNetV3(tiny_space())
    net.set_active(net.space.min_arch())
    block = next(b for b in net.active_blocks() if b.se is not None)
    active = block.active_tensors()
    mid = block.active_mid
    assert mid < block.max_mid
    shared = [
        (active.conv_pw, block.conv_pw.weight),
        *zip(active.bn1, (block.bn1.running_mean, block.bn1.running_var, block.bn1.weight, block.bn1.bias)),
        (active.se.reduce_matrix, block.se.conv_reduce.weight),
        (active.se.expand_matrix, block.se.conv_expand.weight),
    ]
    for view, full in shared:
        assert view.data_ptr() == full.data_ptr() and view.numel() < full.numel()
    assert active.conv_pw.shape == (mid, block.in_channels, 1, 1) and active.bn2.weight.shape == (mid,)
    assert active.conv_pwl.is_contiguous() and active.conv_pwl.data_ptr() != block.conv_pwl.weight.data_ptr()
    assert torch.equal(active.conv_pwl, block.conv_pwl.weight[:, :mid])
    assert active.conv_dw.shape == (mid, 1, 3, 3)


def test_at_full_width_active_tensors_are_the_parameters_themselves():
    """A full-range slice of a parameter is still an autograd node (whose backward copies the gradient
    into a zero-filled tensor), so at full width the block runs with the parameters themselves."""
    net = OFAMobileNetV3(tiny_space())
    net.set_active(net.space.max_arch())
    for block in net.active_blocks():
        active = block.active_tensors()
        assert active.conv_pw is block.conv_pw.weight and active.conv_pwl is block.conv_pwl.weight
        assert active.conv_dw is block.conv_dw.weight  # the largest kernel needs no transform
        for name in ("bn1", "bn2"):
            bn = getattr(block, name)
            assert all(
                a is b for a, b in zip(getattr(active, name), (bn.running_mean, bn.running_var, bn.weight, bn.bias))
            )
        if block.se is not None:
            assert (
                active.se.reduce_bias is block.se.conv_reduce.bias
                and active.se.expand_bias is block.se.conv_expand.bias
            )


def test_gradients_only_reach_the_active_slice():
    torch.manual_seed(0)
    net = OFAMobileNetV3(tiny_space()).train()
    arch = net.space.min_arch()
    net.set_active(arch)
    net(torch.randn(4, 3, arch.resolution, arch.resolution)).sum().backward()
    block = net.blocks[1][0]
    mid = mid_channels(block.in_channels, 2)
    assert block.conv_pw.weight.grad[:mid].abs().sum() > 0
    assert block.conv_pw.weight.grad[mid:].abs().sum() == 0
    assert net.blocks[1][1].conv_pw.weight.grad is None  # depth 1: second block never ran


@pytest.mark.parametrize("frozen", [(), (3,)])
def test_reorganize_channels_keeps_the_function(frozen):
    torch.manual_seed(0)
    net = perturb(OFAMobileNetV3(tiny_space()), seed=2).eval()
    arch = net.space.max_arch()
    net.set_active(arch)
    x = torch.randn(4, 3, arch.resolution, arch.resolution)
    block = net.blocks[2][0]
    importance = block.conv_pwl.weight.abs().sum((0, 2, 3))
    keep = mid_channels(block.in_channels, 3)
    with torch.no_grad():
        before = net(x)
        net.reorganize_channels(frozen)
        after = net(x)
    assert (before - after).abs().max() <= 1e-5
    sorted_importance = block.conv_pwl.weight.abs().sum((0, 2, 3))
    if not frozen:
        assert torch.all(sorted_importance[:-1] >= sorted_importance[1:])
    else:  # the channel set of a trained expand ratio is kept; sorting happens inside each band
        assert torch.allclose(sorted_importance[:keep].sort().values, importance[:keep].sort().values)
        assert torch.all(sorted_importance[: keep - 1] >= sorted_importance[1:keep])
    if block.se is not None:
        se_importance = block.se.conv_expand.weight.abs().sum((0, 2, 3))
        if not frozen:
            assert torch.all(se_importance[:-1] >= se_importance[1:])


def test_save_load_round_trip(tmp_path, net):
    path = net.save(tmp_path / "supernet.pt", meta={"mean": [0.5], "class_names": list("abcdefghij")})
    loaded = OFAMobileNetV3.load(path).eval()
    assert loaded.meta["class_names"][0] == "a"
    arch = sample_arch(net.space, 4)
    x = torch.randn(2, 3, arch.resolution, arch.resolution)
    net.set_active(arch)
    loaded.set_active(arch)
    with torch.no_grad():
        assert torch.equal(net(x), loaded(x))


def test_load_errors_name_the_file(tmp_path, net):
    path = net.save(tmp_path / "supernet.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(OFAError, match=r"truncated.pt: not a readable supernet checkpoint"):
        OFAMobileNetV3.load(truncated)
    with pytest.raises(OFAError, match=r"missing.pt: supernet checkpoint not found"):
        OFAMobileNetV3.load(tmp_path / "missing.pt")
    other = tmp_path / "other.pt"
    torch.save({"format": "something-else"}, other)
    with pytest.raises(OFAError, match="not an ofa supernet"):
        OFAMobileNetV3.load(other)
    wrong = tmp_path / "wrong.pt"
    state = net.state_dict()
    torch.save(
        {"format": "ofa-supernet", "space": tiny_space(final_expand_width=56).to_dict(), "state_dict": state}, wrong
    )
    with pytest.raises(OFAError, match=r"wrong.pt: weights do not match the stored space"):
        OFAMobileNetV3.load(wrong)


def test_static_subnet_save_and_load(tmp_path, net):
    arch = sample_arch(net.space, 9)
    static = net.extract(arch).eval()
    path = save_subnet(static, net.space, arch, tmp_path / "sub.pt", meta={"top1": 90.0})
    again = load_subnet(path)
    x = torch.randn(2, 3, arch.resolution, arch.resolution)
    with torch.no_grad():
        assert torch.equal(static(x), again(x))
    assert again.ofa_meta["arch"] == arch and again.ofa_meta["top1"] == 90.0


def _batches(n=6, res=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 3, res, res, generator=g) * 2 + 1, torch.zeros(8, dtype=torch.long)) for _ in range(n)]


def test_recalibrate_bn_estimates_exact_statistics():
    bn = torch.nn.BatchNorm2d(3)
    data = _batches()
    recalibrate_bn(torch.nn.Sequential(bn), data, batches=4)
    xs = [x for x, _ in data[:4]]
    assert torch.allclose(bn.running_mean, torch.stack([x.mean((0, 2, 3)) for x in xs]).mean(0), atol=1e-6)
    assert torch.allclose(bn.running_var, torch.stack([x.var((0, 2, 3)) for x in xs]).mean(0), atol=1e-5)


def test_recalibrate_supernet_equals_recalibrating_the_extracted_subnet():
    torch.manual_seed(0)
    net = perturb(OFAMobileNetV3(tiny_space()), seed=3)
    arch = sample_arch(net.space, 12)
    untouched = net.blocks[1][0].bn1.running_mean.clone()
    net.set_active(arch)
    static = net.extract()
    data = _batches(res=arch.resolution)
    recalibrate_bn(net, data, batches=5)
    recalibrate_bn(static, data, batches=5)
    net.eval()
    static.eval()
    x = torch.randn(3, 3, arch.resolution, arch.resolution)
    with torch.no_grad():
        assert (net(x) - static(x)).abs().max() <= 1e-4
    mid = net.blocks[1][0].active_mid
    assert torch.equal(net.blocks[1][0].bn1.running_mean[mid:], untouched[mid:])  # other channels keep their stats
    assert not torch.equal(net.blocks[1][0].bn1.running_mean[:mid], untouched[:mid])


def test_sample_active_is_seeded_and_restricted(net):
    a = net.sample_active(np.random.default_rng(5), kernels=[3, 5], depths=[3])
    b = copy.deepcopy(net).sample_active(np.random.default_rng(5), kernels=[3, 5], depths=[3])
    assert a == b and set(a.depths) == {3} and set(a.kernels) <= {3, 5}
    assert net.active_arch == a


def test_evaluating_subnets_restores_the_network_but_for_the_kept_subnets_recalibration():
    torch.manual_seed(0)
    net = perturb(OFAMobileNetV3(tiny_space()), seed=3)
    largest, smallest = net.space.max_arch(12), net.space.min_arch(12)
    calib, test = _batches(res=12), _batches(res=12)[:2]
    session = SimpleNamespace(calib_loader=calib, env=DistEnv.single_process(), device=torch.device("cpu"))
    before = {k: v.clone() for k, v in net.named_buffers()}
    archs = {"smallest": smallest, "largest": largest}
    plain = evaluate_subnets(net, archs, test, session, 3)
    assert all(torch.equal(v, before[k]) for k, v in net.named_buffers())  # exactly as it was
    kept = evaluate_subnets(net, archs, test, session, 3, keep=largest)
    assert kept == plain and list(kept) == list(archs)  # the same figures, in the order asked
    for arch in (largest, smallest):  # the smallest's statistics leave the largest's other channels as they were
        for k, v in net.named_buffers():
            v.copy_(before[k])
        kept = evaluate_subnets(net, archs, test, session, 3, keep=arch)
        reference = copy.deepcopy(net)
        for k, v in reference.named_buffers():
            v.copy_(before[k])
        reference.set_active(arch)
        recalibrate_bn(reference, calib, batches=3)  # what recalibrating it afterwards gives
        changed = [k for k, v in net.named_buffers() if not torch.equal(v, before[k])]
        assert changed and all(torch.equal(v, dict(reference.named_buffers())[k]) for k, v in net.named_buffers())
        assert kept == plain
    with pytest.raises(ValueError, match="is not among the evaluated subnets"):
        evaluate_subnets(net, {"smallest": smallest}, test, session, 3, keep=largest)
