"""OFA-ProxylessNAS family: space, arch, exact layer costs, supernet ↔ timm subnet parity, gene encoding."""

from __future__ import annotations

import itertools
import json
import re
from functools import partial

import numpy as np
import pytest
import torch
from helpers import perturb
from timm.layers import get_act_layer
from timm.models._efficientnet_builder import decode_arch_def
from timm.models.efficientnet import EfficientNet
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ofa.families.mbv3.arch import Arch
from ofa.families.proxyless.arch import ProxylessArch
from ofa.families.proxyless.encoding import ArchEncoder, GeneLayout, sample_arch
from ofa.families.proxyless.layers import LayerSpec, layer_module
from ofa.families.proxyless.space import ProxylessSpace, StageSpec
from ofa.families.proxyless.subnet import build_subnet, count_macs, count_params, timm_args
from ofa.families.proxyless.supernet import OFAProxylessNAS
from ofa.lut.layer_models import input_shape
from ofa.utils.errors import SpaceError


def small_space(**overrides) -> ProxylessSpace:
    """Four stages: strides 2 and 1, a stride-1 first block with a skip (24 -> 24), the single last block."""
    base = dict(
        stages=(StageSpec(16, 2), StageSpec(24, 2), StageSpec(24, 1), StageSpec(32, 1)),
        kernels=(3, 5, 7),
        expands=(2, 3, 4),
        depths=(1, 2, 3),
        resolutions=(12, 16, 20),
        stem_width=8,
        stem_stride=1,
        first_width=8,
        feature_width=64,
        num_classes=10,
        dropout=0.0,
    )
    return ProxylessSpace(**{**base, **overrides})


def micro_space() -> ProxylessSpace:
    """Small enough to enumerate every gene row (128 rows, 72 distinct subnets)."""
    stages = (StageSpec(16, 2), StageSpec(24, 1), StageSpec(32, 2))
    return small_space(stages=stages, kernels=(3,), expands=(2, 3), depths=(1, 2), resolutions=(16,))


@pytest.fixture(scope="module")
def supernet() -> OFAProxylessNAS:
    return perturb(OFAProxylessNAS(small_space())).eval()


def _flop_macs(module: nn.Module, shape: tuple[int, ...]) -> int:
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        module(torch.zeros(shape))
    return counter.get_total_flops() // 2


# ----------------------------------------------------------------- space and arch
def test_preset_is_the_published_space():
    space = ProxylessSpace.preset()
    assert (space.stem_channels, space.first_channels, space.feature_channels) == (40, 24, 1664)
    assert space.stage_channels == (32, 56, 104, 128, 248, 416)  # make_divisible(1.3 * 24/40/80/96/192/320)
    assert tuple(s.stride for s in space.stages) == (2, 2, 2, 1, 2, 1)
    assert space.num_slots == 21 and space.max_arch().depths == (4, 4, 4, 4, 4, 1)
    assert space.count() == (9**2 + 9**3 + 9**4) ** 5 * 9
    d = space.to_dict()
    assert d["family"] == "proxyless" and d["width_mult"] == 1.3
    assert ProxylessSpace.from_dict(d) == space
    assert ProxylessSpace.from_dict({"family": "proxyless", "preset": "ofa_proxyless_d234_e346_k357_w1.3"}) == space
    assert ProxylessSpace.from_dict(json.loads(json.dumps(d))).fingerprint() == space.fingerprint()
    assert space.elastic_dims() == {
        "kernels": (3, 5, 7),
        "expands": (3, 4, 6),
        "depths": (2, 3, 4),
        "resolutions": space.resolutions,
    }


@pytest.mark.parametrize(
    ("d", "field"),
    [
        ({"family": "mbv3"}, "space.family"),
        ({"preset": "mbv3"}, "space.preset"),
        ({"kernel": [3]}, "space.kernel"),
        ({"stages": [{"width": 16, "stride": 3}, {"width": 16, "stride": 1}]}, "space.stages[0].stride"),
        ({"stages": [{"width": 16, "stride": 1, "se": True}]}, "space.stages[0].se"),
        ({"stages": [{"width": 16, "stride": 1}]}, "space.stages"),
        ({"kernels": [4]}, "space.kernels"),
        ({"width_mult": "wide"}, "space.width_mult"),
    ],
)
def test_bad_space_fields_name_the_field(d, field):
    with pytest.raises(SpaceError, match=rf"^{re.escape(field)}: "):
        ProxylessSpace.from_dict(d)


def test_unknown_preset():
    with pytest.raises(SpaceError, match=r"^preset: unknown preset 'w2' \(allowed: ofa_proxyless_d234_e346_k357_w1\.3"):
        ProxylessSpace.preset("w2")


def test_digits_size_recipe_keeps_spatial_size_to_the_last_stage():
    strides = [1, 2, 1, 1, 2, 1]
    space = ProxylessSpace.from_dict(
        {
            "family": "proxyless",
            "stages": [{"width": w, "stride": s} for w, s in zip((24, 40, 80, 96, 192, 320), strides)],
            "stem_stride": 1,
            "width_mult": 0.5,
            "resolutions": [16],
            "in_channels": 1,
            "num_classes": 10,
        }
    )
    assert space.stage_input_hw(16, space.num_stages - 1) == 4
    model = build_subnet(space, space.max_arch()).eval()
    assert model(torch.zeros(1, 1, 16, 16)).shape == (1, 10)
    assert model.conv_head(model.blocks(model.bn1(model.conv_stem(torch.zeros(1, 1, 16, 16))))).shape[-1] == 4


def test_arch_json_carries_the_family():
    space = small_space()
    arch = space.stamp(sample_arch(space, 0))
    d = arch.to_dict()
    assert d["family"] == "proxyless" and d["space"] == space.fingerprint()
    back = ProxylessArch.from_json(arch.to_json())
    assert back == arch and back.space == arch.space and back.extra == {}
    assert arch.with_extra({"macs": 5}).to_dict()["macs"] == 5
    with pytest.raises(SpaceError, match=r"^arch\.family: expected 'proxyless', got None"):
        ProxylessArch.from_dict({k: v for k, v in d.items() if k != "family"})
    assert Arch(arch.resolution, arch.depths, arch.kernels, arch.expands) != arch  # an mbv3 arch is another thing
    with pytest.raises(SpaceError, match="not an OFA-ProxylessNAS arch"):
        space.validate(Arch(arch.resolution, arch.depths, arch.kernels, arch.expands))


def test_validate_names_the_first_bad_field():
    space = small_space()
    good = space.max_arch()
    cases = [
        (ProxylessArch(good.resolution, (3, 3, 3, 2), good.kernels, good.expands), r"arch\.depths\[3\]: 2 is not one"),
        (ProxylessArch(good.resolution, good.depths, good.kernels[:-1], good.expands), r"arch\.kernels: expected 10"),
        (ProxylessArch(good.resolution, good.depths, good.kernels, (5,) * 10), r"arch\.expands\[0\]: 5 is not one"),
        (ProxylessArch(13, good.depths, good.kernels, good.expands), r"arch\.resolution: 13"),
    ]
    for arch, message in cases:
        with pytest.raises(SpaceError, match=message):
            space.validate(arch)
    with pytest.raises(SpaceError, match="was chosen in space"):
        space.validate(ProxylessSpace.preset().stamp(good))


def test_official_config_round_trip():
    space = ProxylessSpace.preset()
    rng = np.random.default_rng(0)
    for _ in range(10):
        arch = sample_arch(space, rng)
        config = arch.to_ofa_config()
        assert len(config["ks"]) == len(config["e"]) == 21 and len(config["d"]) == 6
        assert ProxylessArch.from_ofa_config(config) == arch
        assert ProxylessArch.from_ofa_config(json.loads(json.dumps(config))).to_ofa_config() == config
    config = {**space.max_arch().to_ofa_config(), "r": [160]}
    config["d"] = [4] * 6  # the official network runs one last block whatever d[-1] says
    assert ProxylessArch.from_ofa_config(config).depths == (4, 4, 4, 4, 4, 1)
    assert ProxylessArch.from_ofa_config(config, 128).resolution == 128
    bad = [
        ({**config, "ks": config["ks"][:-1]}, "ks has 20 entries but e has 21"),
        ({**config, "ks": config["ks"][:-1], "e": config["e"][:-1]}, "20 ks/e entries are not 5 equal stages"),
        ({**config, "d": [5, 4, 4, 4, 4, 1]}, r"ofa config\.d\[0\]: 5 is outside 1\.\.4"),
        ({k: v for k, v in config.items() if k != "r"}, "no resolution given"),
        ({**config, "e": [6.5] * 21}, r"ofa config\.e\[0\]: expected an integer"),
    ]
    for cfg, message in bad:
        with pytest.raises(SpaceError, match=message):
            ProxylessArch.from_ofa_config(cfg)


# ----------------------------------------------------------------- exact costs
def test_analytic_macs_and_params_equal_the_built_subnet():
    space = small_space()
    archs = [space.min_arch(), space.max_arch(), *(sample_arch(space, seed) for seed in range(4))]
    for arch in archs:
        model = build_subnet(space, arch)
        assert count_macs(model, arch.resolution) == space.macs(arch)
        assert count_params(model) == space.params(arch)
    preset = ProxylessSpace.preset()
    arch = sample_arch(preset, 1, resolutions=[128])
    model = build_subnet(preset, arch)
    assert (count_macs(model, 128), count_params(model)) == (preset.macs(arch), preset.params(arch))


def test_layer_modules_cost_what_their_specs_say():
    space = small_space()
    specs = {spec.key: spec for seed in range(3) for spec in space.layers(sample_arch(space, seed))}
    assert {spec.kind for spec in specs.values()} == {"stem", "first", "mbconv", "head"}
    for key, spec in specs.items():
        assert LayerSpec.from_key(key) == spec
        module = layer_module(space, spec)
        assert _flop_macs(module, input_shape(spec, 1)) == spec.macs, key
        assert sum(p.numel() for p in module.parameters()) == spec.params, key
        out = module(torch.zeros(input_shape(spec, batch=2)))
        assert out.shape == ((2, spec.out_c) if spec.kind == "head" else (2, spec.out_c, spec.out_hw, spec.out_hw))
    with pytest.raises(SpaceError, match="not an OFA-ProxylessNAS layer key"):
        LayerSpec.from_key("mbconv:in=8x8x16:out=24:k=3:mid=48:s=1:se=0:act=relu")  # an mbv3 key


# ----------------------------------------------------------------- supernet and timm subnets
def test_extracted_subnets_compute_the_supernet_exactly(supernet):
    space = supernet.space
    rng = np.random.default_rng(0)
    for _ in range(20):
        arch = sample_arch(space, rng)
        x = torch.randn(2, 3, arch.resolution, arch.resolution, generator=torch.Generator().manual_seed(1))
        supernet.set_active(arch)
        with torch.no_grad():
            expected = supernet(x)
            got = supernet.extract(arch).eval()(x)
        assert expected.abs().max() > 0.1
        assert (got - expected).abs().max() <= 1e-5, arch.short()
    assert supernet.active_arch == arch  # extract leaves the active subnet as it was
    subnet = supernet.extract(space.max_arch())
    assert space.first_channels == space.stem_channels and not subnet.blocks[0][0].has_skip  # as the official
    assert subnet.blocks[3][0].has_skip and not subnet.blocks[2][0].has_skip  # stride 1, 24 -> 24; stride 2


def test_timm_rebuilds_the_subnet_from_timm_args_alone(supernet):
    arch = sample_arch(supernet.space, 3)
    subnet = supernet.extract(arch).eval()
    args = json.loads(json.dumps(timm_args(supernet.space, arch)))  # what a model folder's config.json holds
    model = EfficientNet(
        decode_arch_def(args["arch_def"]),
        act_layer=get_act_layer(args["act_layer"]),
        norm_layer=partial(nn.BatchNorm2d, eps=args["bn_eps"]),
        **args["kwargs"],
    )
    model.conv_stem.stride = (args["stem_stride"],) * 2
    model.load_state_dict(subnet.state_dict())
    x = torch.randn(1, 3, arch.resolution, arch.resolution)
    with torch.no_grad():
        assert torch.equal(model.eval()(x), subnet(x))


def test_sample_active_honours_restrictions(supernet):
    for seed in range(5):
        arch = supernet.sample_active(seed, kernels=[5], expands=[2, 4], depths=[2], resolutions=[16])
        assert arch.depths == (2, 2, 2, 1) and arch.resolution == 16
        assert set(arch.kernels) == {5} and set(arch.expands) <= {2, 4}
        assert supernet.active_arch == arch
    supernet.set_active(supernet.space.max_arch())


def test_reorganized_channels_leave_the_full_network_unchanged():
    net = perturb(OFAProxylessNAS(small_space()), seed=2).eval()
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        before = net(x)
        net.reorganize_channels()
        assert (net(x) - before).abs().max() <= 1e-5


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_supernet_file_round_trip(tmp_path, supernet, suffix):
    path = supernet.save(tmp_path / f"net{suffix}", meta={"mean": [0.5] * 3})
    loaded = OFAProxylessNAS.load(path).eval()
    assert loaded.space == supernet.space and loaded.meta == {"mean": [0.5] * 3}
    arch = sample_arch(supernet.space, 4)
    x = torch.randn(1, 3, arch.resolution, arch.resolution)
    supernet.set_active(arch)
    loaded.set_active(arch)
    with torch.no_grad():
        assert torch.equal(loaded(x), supernet(x))
    supernet.set_active(supernet.space.max_arch())


# ----------------------------------------------------------------- gene encoding and cost terms
def test_gene_rows_round_trip_and_canonical_rows_count_the_space():
    space = micro_space()
    layout = GeneLayout.of(space)
    rows = np.array(list(itertools.product(*(range(n) for n in layout.sizes))))
    assert len(rows) == 128
    for row in rows[::7]:
        assert np.array_equal(layout.encode(layout.decode(row)), row)
    assert len({tuple(r) for r in layout.canonical(rows)}) == space.count() == 72
    every = list(layout.every_arch(space.resolutions[0]))  # each distinct subnet once, as its canonical row
    assert {tuple(r) for r in layout.canonical(layout.encode_many(every))} == {
        tuple(r) for r in layout.canonical(rows) if r[layout.resolution] == 0
    }
    assert len(every) == space.count()
    active = layout.active(rows)
    assert active[:, : layout.slices["depths"].stop].all() and active[:, -1].all()  # last slot always runs
    with pytest.raises(SpaceError, match=r"^row 3\.depths\[2\]"):
        layout.encode(ProxylessArch(16, (1, 1, 2), (3,) * 5, (2,) * 5), "row 3")


def test_cost_terms_sum_to_the_space_costs():
    space = small_space()
    layout = GeneLayout.of(space)
    rows = layout.sample(40, np.random.default_rng(0))
    active = layout.term_active(rows)
    assert active.shape == (40, len(layout.terms)) and active[:, 0].all()
    for row, mask in zip(rows, active):
        arch = layout.decode(row)
        values = [layout.choices[c][row[c]] for c in range(layout.genes)]
        layers = [
            lay for term, on in zip(layout.terms, mask) if on for lay in term.layers(*(values[c] for c in term.columns))
        ]
        assert sum(lay.macs for lay in layers) == space.macs(arch)
        assert sum(lay.params for lay in layers) == space.params(arch)


def test_cheapest_is_the_exact_minimum():
    space = micro_space()
    layout = GeneLayout.of(space)
    g = np.random.default_rng(1)
    fixed = g.random(len(space.resolutions))
    tables = [g.random((len(space.resolutions), len(space.kernels), len(space.expands))) for _ in layout.terms[1:]]

    def cost(row: np.ndarray) -> float:
        on = layout.term_active(row)[0, 1:]
        r, ks, es = row[layout.resolution], row[layout.slices["kernels"]], row[layout.slices["expands"]]
        return fixed[r] + sum(t[r, k, e] for t, k, e, o in zip(tables, ks, es, on) if o)

    rows = np.array(list(itertools.product(*(range(n) for n in layout.sizes))))
    best = layout.cheapest(fixed, tables)
    assert best.shape == (1, layout.genes)
    assert cost(best[0]) == pytest.approx(min(cost(r) for r in rows))


def test_arch_encoder_features():
    space = small_space()
    encoder = ArchEncoder(space)
    assert encoder.dim == space.num_slots * 6 + 3
    arch = ProxylessArch(16, (1, 2, 3, 1), (3, 5, 7, 3, 5, 7, 3, 5, 7, 7), (2, 3, 4, 2, 3, 4, 2, 3, 4, 4))
    f = encoder.encode(arch)[0].reshape(-1)
    slots = f[: encoder.res_offset].reshape(space.num_slots, 6)
    assert slots.sum(1).tolist() == [2, 0, 0, 2, 2, 0, 2, 2, 2, 2]  # slots past each stage's depth are zeros
    assert slots[9].tolist() == [0, 0, 1, 0, 0, 1] and f[encoder.res_offset :].tolist() == [0, 1, 0]
    rows = GeneLayout.of(space).sample(5, np.random.default_rng(0))
    assert np.array_equal(encoder.encode_rows(rows), encoder.encode([GeneLayout.of(space).decode(r) for r in rows]))
