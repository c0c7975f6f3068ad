import json

import numpy as np
import pytest
import yaml
from conftest import tiny_space

from ofa.errors import SpaceError
from ofa.space import Arch, LayerSpec, SearchSpace
from ofa.subnet import build_subnet, count_macs, count_params


def test_mbv3_space_matches_paper():
    space = SearchSpace.mbv3()
    assert space.count() == ((3 * 3) ** 2 + (3 * 3) ** 3 + (3 * 3) ** 4) ** 5
    assert f"{space.count():.1e}" == "2.2e+19"
    assert space.stage_channels == (24, 40, 80, 112, 160)
    assert [s.stride for s in space.stages] == [2, 2, 2, 1, 2]
    assert [s.se for s in space.stages] == [False, True, False, True, True]
    assert [s.act for s in space.stages] == ["relu", "relu", "hswish", "hswish", "hswish"]
    assert space.resolutions == tuple(range(128, 225, 4))
    assert 7.6e6 < space.params(space.max_arch()) < 7.7e6  # OFA-MBv3 (w1.0) largest subnet: 7.7M


@pytest.mark.parametrize("seed", range(4))
def test_macs_and_params_match_counters(seed):
    for space in (tiny_space(), SearchSpace.mbv3()):
        arch = space.sample(seed)
        if space.num_stages == 5:
            arch = Arch(128, arch.depths, arch.kernels, arch.expands)
        model = build_subnet(space, arch)
        assert space.params(arch) == count_params(model)
        assert space.macs(arch) == count_macs(model, arch.resolution, space.in_channels)


def test_width_mult_rounds_like_ofa():
    space = SearchSpace.mbv3(width_mult=1.2)
    assert space.stage_channels == (32, 48, 96, 136, 192)
    assert space.feature_channels == 1536
    # The official OFAMobileNetV3 scales the 1280-wide feature layer below 1 too (its w0.5 fixture has 640).
    assert SearchSpace.mbv3(width_mult=0.75).feature_channels == 960
    assert SearchSpace.mbv3(width_mult=0.5).feature_channels == 640


def test_json_round_trip(tmp_path, space):
    arch = space.sample(3).with_extra(predicted_top1=91.5, latency_ms=4.2)
    path = arch.save(tmp_path / "a.json")
    back = Arch.load(path)
    assert back == arch and back.extra == {"predicted_top1": 91.5, "latency_ms": 4.2}
    assert json.loads(path.read_text())["kernels"] == list(arch.kernels)
    assert len(arch.kernels) == len(arch.expands) == space.num_slots == 9


def test_space_dict_round_trip_and_yaml():
    space = tiny_space()
    again = SearchSpace.from_dict(yaml.safe_load(yaml.safe_dump(space.to_dict())))
    assert again == space and again.fingerprint() == space.fingerprint()
    assert SearchSpace.from_dict({"preset": "mbv3", "num_classes": 10}) == SearchSpace.mbv3(num_classes=10)
    ranged = SearchSpace.from_dict({"preset": "mbv3", "resolutions": {"start": 128, "stop": 224, "step": 16}})
    assert ranged.resolutions == (128, 144, 160, 176, 192, 208, 224)


def test_shipped_digits_space_loads():
    with open("recipes/digits.yaml") as f:
        space = SearchSpace.from_dict(yaml.safe_load(f)["space"])
    assert space.num_classes == 10 and space.in_channels == 1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("resolution", 130, "arch.resolution: 130 is not one of 128..224 step 4"),
        ("kernels", (3,) * 19 + (4,), "arch.kernels[19]: 4 is not one of [3, 5, 7]"),
        ("expands", (6,) * 19, "arch.expands: expected 20 values for this space, got 19"),
        ("depths", (2, 3, 4, 5, 2), "arch.depths[3]: 5 is not one of [2, 3, 4]"),
    ],
)
def test_validation_names_the_field(field, value, message):
    space = SearchSpace.mbv3()
    arch = space.max_arch()
    bad = Arch(**{**{k: getattr(arch, k) for k in ("resolution", "depths", "kernels", "expands")}, field: value})
    with pytest.raises(SpaceError) as err:
        space.validate(bad)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("d", "message"),
    [
        ({"preset": "mbv3", "kernel": [3]}, "space.kernel: unknown key"),
        ({"preset": "mbv3", "kernels": [3, "5"]}, "space.kernels: expected a list of integers"),
        ({"preset": "mbv3", "kernels": [4, 6]}, "kernels: kernel sizes must be odd"),
        ({"preset": "mbv3", "depths": [3, 2]}, "depths: choices must be increasing"),
        ({"preset": "mbv2"}, "space.preset: unknown preset 'mbv2'"),
        ({"stages": [{"width": 16, "stride": 3}]}, "stages[0].stride: must be 1 or 2"),
        ({"stages": [{"width": 16, "stride": 1, "act": "gelu"}]}, "space.stages[0].act: 'gelu' is not one of"),
        ({"kernels": [3]}, "space.stages: missing"),
    ],
)
def test_space_errors_name_the_key(d, message):
    with pytest.raises(SpaceError, match=None) as err:
        SearchSpace.from_dict(d)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "invalid JSON"),
        ('{"resolution": 16, "depths": [1], "kernels": [3]}', "missing field 'expands'"),
        ('{"resolution": "16", "depths": [1], "kernels": [3], "expands": [2]}', "'resolution' must be an integer"),
        ('{"resolution": 16, "depths": [1.5], "kernels": [3], "expands": [2]}', "'depths' must be a list of int"),
    ],
)
def test_arch_json_errors(text, message):
    with pytest.raises(SpaceError) as err:
        Arch.from_json(text, "a.json")
    assert message in str(err.value) and str(err.value).startswith("a.json")


def test_seeded_sampling_is_reproducible(space):
    assert [space.sample(7) for _ in range(3)] == [space.sample(7)] * 3
    a, b = np.random.default_rng(1), np.random.default_rng(1)
    assert [space.sample(a) for _ in range(5)] == [space.sample(b) for _ in range(5)]
    archs = {space.sample(i) for i in range(50)}
    assert len(archs) == 50
    restricted = [space.sample(i, kernels=[7], expands=[4], depths=[3]) for i in range(10)]
    assert all(set(a.kernels) == {7} and set(a.expands) == {4} and set(a.depths) == {3} for a in restricted)


def test_encoding_round_trip_and_genetic_ops(space, rng):
    rows = space.sample_genes(200, rng)
    assert (rows >= 0).all() and (rows < space.gene_sizes).all()
    for row in rows[:20]:
        arch = space.decode(row)
        space.validate(arch)
        assert (space.encode(arch) == row).all()
    parent, other = space.sample(1), space.sample(2)
    child = space.crossover(parent, other, 0)
    for name in ("depths", "kernels", "expands"):
        assert all(c in (p, o) for c, p, o in zip(getattr(child, name), getattr(parent, name), getattr(other, name)))
    mutants = [space.mutate(parent, i, prob=0.1) for i in range(200)]
    changed = np.mean([m.kernels[0] != parent.kernels[0] for m in mutants])
    assert 0.02 < changed < 0.15  # redraw with p=0.1, 2/3 of redraws change the value
    assert all(space.validate(m) for m in mutants)


def test_layer_keys_round_trip_and_cover_arch(space):
    arch = space.sample(5)
    layers = space.layers(arch)
    assert [lay.kind for lay in layers[:2]] == ["stem", "first"] and layers[-1].kind == "head"
    assert sum(lay.kind == "mbconv" for lay in layers) == sum(arch.depths)
    for lay in layers:
        assert LayerSpec.from_key(lay.key) == lay
    assert layers[-2].in_hw == space.stage_input_hw(arch.resolution, space.num_stages)
