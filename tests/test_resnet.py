"""OFA-ResNet: space, arch, layer costs, elastic supernet, timm subnets and the gene encoding (small spaces)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from helpers import perturb
from timm.models.byobnet import ByobNet

from ofa.families.resnet.arch import ResNetArch
from ofa.families.resnet.encoding import ArchEncoder, GeneLayout, sample_arch
from ofa.families.resnet.layers import STEM_PATCH, LayerSpec, layer_module, mid_channels
from ofa.families.resnet.space import ResNetSpace
from ofa.families.resnet.subnet import build_subnet, count_macs, count_params, timm_args, timm_model, timm_snippet
from ofa.families.resnet.supernet import OFAResNet
from ofa.utils.errors import OFAError, SpaceError

SMALL = {"widths": [0.1, 0.15, 0.2], "num_classes": 10, "resolutions": [32, 37, 48]}
# a digits-size recipe: 16 px grayscale, no stem stride or max-pool, so the last stage still sees 2x2
DIGITS = {**SMALL, "resolutions": [16], "in_channels": 1, "stem_stride": 1, "stem_pool": False}


@pytest.fixture(scope="module")
def space() -> ResNetSpace:
    return ResNetSpace.from_dict(SMALL)


@pytest.fixture(scope="module")
def net(space) -> OFAResNet:
    return perturb(OFAResNet(space)).eval()


# ----------------------------------------------------------------- space and arch
def test_published_space_widths_are_the_official_ones():
    space = ResNetSpace.ofa_resnet50()
    assert (space.stem_mid_choices(), space.stem_out_choices()) == ((24, 24, 32), (40, 48, 64))
    assert [space.stage_choices(s)[-1] for s in range(4)] == [256, 512, 1024, 2048]
    assert space.stage_choices(0) == (168, 208, 256)
    assert (space.num_slots, space.num_widths) == (18, 6)
    assert space.to_dict()["family"] == "resnet"
    assert ResNetSpace.from_dict({"family": "resnet", "preset": "ofa_resnet50"}) == space


def test_space_dict_round_trip_and_fingerprint(space):
    again = ResNetSpace.from_dict(json.loads(json.dumps(space.to_dict())))
    assert again == space and again.fingerprint() == space.fingerprint()
    assert ResNetSpace.from_dict({**SMALL, "num_classes": 5}).fingerprint() != space.fingerprint()


@pytest.mark.parametrize(
    ("d", "message"),
    [
        ({"kernels": [3]}, r"space\.kernels: unknown key"),
        ({"preset": "mbv3"}, r"space\.preset: unknown preset"),
        ({"family": "mbv3"}, r"space\.family"),
        ({"widths": [1.0, 0.5]}, r"space\.widths: choices must be increasing"),
        ({"strides": [1, 2]}, r"space\.strides: expected 4 values"),
        ({"stem_pool": "yes"}, r"space\.stem_pool: expected true or false"),
        ({"widths": [0.25, 1.0]}, r"space\.stage_widths\[0\]: a width choice equals"),
    ],
)
def test_bad_space_fields_are_named(d, message):
    with pytest.raises(SpaceError, match=message):
        ResNetSpace.from_dict(d)


def test_arch_round_trips_and_validates(space, tmp_path):
    arch = space.stamp(sample_arch(space, 3))
    assert arch.to_dict()["family"] == "resnet"
    assert ResNetArch.load(arch.save(tmp_path / "a.json")) == arch
    assert ResNetArch.from_ofa_config(arch.to_ofa_config()) == arch
    assert space.validate(arch) is arch
    stem_middle = ResNetArch(32, (1, 0, 0, 0, 0), arch.expands, arch.widths)
    with pytest.raises(SpaceError, match=r"depths\[0\]: 1 is not one of \[0, 2\]"):
        space.validate(stem_middle)
    with pytest.raises(SpaceError, match=r"widths: expected 6 values"):
        space.validate(ResNetArch(32, arch.depths, arch.expands, (0,) * 5))
    with pytest.raises(SpaceError, match="family"):
        ResNetArch.from_dict({**arch.to_dict(), "family": "mbv3"})
    with pytest.raises(SpaceError, match="chosen in space"):
        ResNetSpace.from_dict({**SMALL, "num_classes": 5}).validate(arch)


def test_count_is_the_number_of_gene_settings():
    space = ResNetSpace.from_dict(
        {"widths": [0.5, 1.0], "expands": [0.25], "depths": [0, 1], "base_depths": [1], "stage_widths": [64],
         "strides": [2], "stem_width": 16}
    )  # fmt: skip
    assert space.count() == 2 * 2**2 * 2 * (1 + 1)  # stem block, stem widths, stage width, depths 1 or 2


# ----------------------------------------------------------------- layers, MACs and params
@pytest.mark.parametrize(
    "spec",
    [
        LayerSpec("stem", 15, 3, 8, stride=2),
        LayerSpec("stem_res", 8, 8, 8),
        LayerSpec("pool", 9, 16, 16, stride=2),
        LayerSpec("bottleneck", 9, 16, 24, 8, 2, True),
        LayerSpec("bottleneck", 5, 24, 24, 16, 1, False),
        LayerSpec("head", 3, 40, 10),
    ],
)
def test_layer_costs_are_the_built_modules(space, spec):
    module, shape = layer_module(space, spec), (1, spec.in_c, spec.in_hw, spec.in_hw)
    assert LayerSpec.from_key(spec.key) == spec
    assert count_params(module) == spec.params
    counter = torch.utils.flop_counter.FlopCounterMode(display=False)
    with counter, torch.no_grad():
        out = module(torch.randn(shape))
    assert counter.get_total_flops() // 2 == spec.macs
    if spec.kind != "head":
        assert tuple(out.shape[1:]) == (spec.out_c, spec.out_hw, spec.out_hw)


@pytest.mark.parametrize("recipe", [SMALL, DIGITS])
def test_macs_and_params_are_the_timm_subnets(recipe):
    space = ResNetSpace.from_dict(recipe)
    for seed in range(4):
        arch = sample_arch(space, seed)
        model = build_subnet(space, arch)
        assert count_macs(model, arch.resolution, space.in_channels) == space.macs(arch)
        assert count_params(model) == space.params(arch)


# ----------------------------------------------------------------- supernet and extraction
def test_extracted_subnets_compute_the_supernet(net, space):
    """20 random archs (odd resolution included): the timm ByobNet equals the active supernet."""
    for seed in range(20):
        arch = net.sample_active(seed)
        sub = net.extract(arch).eval()
        assert isinstance(sub, ByobNet)
        x = torch.randn(2, 3, arch.resolution, arch.resolution)
        with torch.no_grad():
            y = net(x)
            assert y.abs().max() > 0.1
            assert (sub(x) - y).abs().max() <= 1e-5
    assert net.active_arch == arch


def test_digits_supernet_extracts_and_trains():
    space = ResNetSpace.from_dict(DIGITS)
    net = perturb(OFAResNet(space))
    arch = net.sample_active(1)
    x = torch.randn(4, 1, 16, 16)
    net(x).sum().backward()  # training mode: batch statistics over the active channels
    assert net.stem.conv1.conv.weight.grad is not None
    net.eval()
    sub = net.extract(arch).eval()
    with torch.no_grad():
        assert (sub(x) - net(x)).abs().max() <= 1e-5
        assert sub.forward_features(x).shape[-2:] == (2, 2)


def test_reorganized_channels_keep_the_function_and_the_frozen_widths(space):
    net = perturb(OFAResNet(space)).eval()
    net.set_active(space.max_arch(32))
    x = torch.randn(1, 3, 32, 32)
    block = net.stages[1][0]
    frozen = mid_channels(max(space.stage_choices(1)), 0.2)
    kept = block.conv1_1x1.conv.weight[:frozen].clone()
    with torch.no_grad():
        before = net(x)
        net.reorganize_channels(frozen_expands=[0.2])
        assert (net(x) - before).abs().max() <= 1e-5 * before.abs().max()  # a sum in another order
    assert torch.equal(torch.sort(block.conv1_1x1.conv.weight[:frozen].flatten())[0], torch.sort(kept.flatten())[0])
    importance = block.conv3_1x1.conv.weight.abs().sum((0, 2, 3))[frozen:]
    assert torch.all(importance[:-1] >= importance[1:])


def test_sample_active_keeps_to_restrictions(net, space):
    for seed in range(10):
        arch = net.sample_active(seed, depths=[2], expands=[0.35], widths=[2], resolutions=[37])
        assert arch == space.max_arch(37)
        arch = net.sample_active(seed, depths=[0, 1], widths=[0])
        assert arch.depths[0] == 0 and max(arch.depths) <= 1 and set(arch.widths) == {0}
    dims = space.elastic_dims()
    assert dims == {"depths": (0, 1, 2), "expands": (0.2, 0.25, 0.35), "widths": (0, 1, 2), "resolutions": (32, 37, 48)}
    layout = GeneLayout.of(space)
    assert layout.uniform(37, {d: max(c) for d, c in dims.items() if d != "resolutions"}) == space.max_arch(37)
    assert layout.uniform(32, {d: min(c) for d, c in dims.items() if d != "resolutions"}) == space.min_arch(32)
    assert layout.uniform(32, {"depths": 1}).depths == (0, 1, 1, 1, 1)  # the stem block runs at depth 2 only


@pytest.mark.parametrize("name", ["supernet.pt", "supernet.safetensors"])
def test_supernet_file_round_trip(net, tmp_path, name):
    loaded = OFAResNet.load(net.save(tmp_path / name, meta={"k": 1}))
    assert loaded.space == net.space and loaded.meta == {"k": 1}
    x = torch.randn(1, 3, 32, 32)
    loaded.eval().set_active(net.active_arch)
    with torch.no_grad():
        assert torch.equal(loaded(x), net(x))
    torch.save({"format": "something"}, tmp_path / "bad.pt")
    with pytest.raises(OFAError, match="not an ofa supernet"):
        OFAResNet.load(tmp_path / "bad.pt")


def test_timm_args_rebuild_the_subnet_with_the_printed_stem_patch(net, space):
    arch = space.max_arch(32)
    args = json.loads(json.dumps(timm_args(space, arch)))
    model = timm_model(args).eval()
    model.load_state_dict(net.extract(arch).state_dict())
    plain = timm_model({**args, "stem_residual": False}).eval()
    plain.load_state_dict(model.state_dict())
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert not torch.allclose(plain(x), model(x))
        exec(STEM_PATCH, {"model": plain})  # what a model card prints
        assert torch.equal(plain(x), model(x))


def test_the_model_card_snippet_rebuilds_the_subnet_with_timm_alone(tmp_path, monkeypatch):
    """Stem patch and stem strides included (no max-pool: timm would stride the stem's last conv)."""
    from safetensors.torch import save_file

    space = ResNetSpace.from_dict({**SMALL, "stem_pool": False})
    arch = space.max_arch(37)
    model = perturb(build_subnet(space, arch)).eval()
    (tmp_path / "config.json").write_text(json.dumps({"timm": timm_args(space, arch)}))
    save_file(model.state_dict(), tmp_path / "model.safetensors")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(timm_snippet("config.json", "timm", "model.safetensors"), scope)
    x = torch.randn(1, 3, 37, 37)
    with torch.no_grad():
        assert torch.equal(scope["model"](x), model(x))


def test_patched_subnet_exports_to_onnx(net, space):
    """The stem patch is a forward hook, which the ONNX tracer runs (torch.export does too)."""
    import onnxruntime as ort

    from ofa.runtime.convert import export_onnx

    arch = space.max_arch(37)
    model = net.extract(arch).eval()
    x = torch.randn(1, 3, 37, 37)
    session = ort.InferenceSession(export_onnx(model, tuple(x.shape)))
    (y,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        expected = model(x)
        assert np.abs(y - expected.numpy()).max() <= 1e-4 * expected.abs().max().item()


# ----------------------------------------------------------------- encoding and cost terms
def test_gene_rows_round_trip(space):
    layout = GeneLayout.of(space)
    assert layout.genes == 1 + 5 + 18 + 6
    archs = [sample_arch(space, s) for s in range(10)]
    rows = layout.encode_many(archs)
    assert [layout.decode(r) for r in rows] == archs
    assert np.all(rows < layout.sizes)
    canonical = layout.canonical(rows)
    assert [space.macs(layout.decode(r)) for r in canonical] == [space.macs(a) for a in archs]


def test_cost_terms_sum_to_the_space_macs_and_params(space):
    layout = GeneLayout.of(space)
    rows = layout.sample(30, np.random.default_rng(0))
    active = layout.term_active(rows)
    assert active.shape == (30, len(layout.terms))
    for row, on in zip(rows, active):
        arch = layout.decode(row)
        layers = [
            spec
            for term, run in zip(layout.terms, on)
            if run
            for spec in term.layers(*(layout.choices[c][row[c]] for c in term.columns))
        ]
        assert sum(s.macs for s in layers) == space.macs(arch)
        assert sum(s.params for s in layers) == space.params(arch)
    assert max(len(t.columns) for t in layout.terms) == 4  # resolution, expand, input and output width


def test_cheapest_rows_are_the_exact_minimum():
    """Random term tables on a space small enough to try every row: the dynamic program finds the minimum."""
    space = ResNetSpace.from_dict(
        {"widths": [0.5, 0.75, 1.0], "expands": [0.25, 0.5], "depths": [0, 1], "base_depths": [1, 2],
         "stage_widths": [64, 128], "strides": [2, 2], "stem_width": 16, "resolutions": [16, 24]}
    )  # fmt: skip
    layout = GeneLayout.of(space)
    rng = np.random.default_rng(0)
    tables = [rng.random([int(layout.sizes[c]) for c in term.columns]) for term in layout.terms]
    rows = np.array(list(itertools.product(*(range(n) for n in layout.sizes))))
    active = layout.term_active(rows)
    cost = sum(np.where(active[:, t], table[tuple(rows[:, c] for c in term.columns)], 0.0)
               for t, (term, table) in enumerate(zip(layout.terms, tables)))  # fmt: skip
    cheapest = layout.cheapest(np.zeros(2), tables)
    found = {int(r[layout.resolution]): cost[np.all(rows == r, axis=1)][0] for r in cheapest}
    for res in range(2):
        assert found[res] == pytest.approx(cost[rows[:, layout.resolution] == res].min())


def test_arch_encoder_features(space):
    enc = ArchEncoder(space)
    arch = space.min_arch(48)
    f = enc.encode(arch)
    assert enc.dim == 3 + 2 + 18 * 3 + 6 * 3  # resolution, stem block, expands per slot, widths
    assert f.shape == (1, enc.dim)
    # resolution, stem depth, the 2+2+4+2 blocks' expands (none of the extra slots) and 6 widths
    assert f.sum() == 1 + 1 + 10 + 6
    assert not np.array_equal(enc.encode(space.max_arch(48)), f)


def test_every_arch_gives_each_distinct_subnet_once():
    """What a latency table calibrates on for a space smaller than its calibration set."""
    space = ResNetSpace.from_dict(
        {"widths": [0.5, 1.0], "expands": [0.25, 0.35], "depths": [0, 1, 2], "base_depths": [1, 1],
         "stage_widths": [48, 64], "strides": [1, 2], "stem_width": 16, "resolutions": [8]}
    )  # fmt: skip
    layout = GeneLayout.of(space)
    rows = layout.encode_many(list(layout.every_arch(8)))
    assert len(rows) == space.count() == len({tuple(r) for r in layout.canonical(rows)})
