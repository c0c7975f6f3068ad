from dataclasses import replace

import pytest
import yaml
from helpers import tiny_space

from ofa.families.counts import count_macs, count_params
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.encoding import sample_arch
from ofa.families.mbv3.layers import LayerSpec
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.subnet import build_subnet
from ofa.utils.errors import SpaceError


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
        arch = sample_arch(space, seed)
        if space.num_stages == 5:
            arch = Arch(128, arch.depths, arch.kernels, arch.expands)
        model = build_subnet(space, arch)
        assert space.params(arch) == count_params(model)
        assert space.macs(arch) == count_macs(model, arch.resolution, space.in_channels)


def test_width_mult_rounds_like_ofa():
    space = replace(SearchSpace.mbv3(), width_mult=1.2)
    assert space.stage_channels == (32, 48, 96, 136, 192)
    assert space.feature_channels == 1536
    # The official OFAMobileNetV3 scales the 1280-wide feature layer below 1 too (its w0.5 fixture has 640).
    assert replace(SearchSpace.mbv3(), width_mult=0.75).feature_channels == 960
    assert replace(SearchSpace.mbv3(), width_mult=0.5).feature_channels == 640


def test_space_dict_round_trip_and_yaml():
    space = tiny_space()
    again = SearchSpace.from_dict(yaml.safe_load(yaml.safe_dump(space.to_dict())))
    assert again == space and again.fingerprint() == space.fingerprint()
    assert SearchSpace.from_dict({"preset": "mbv3", "num_classes": 10}) == replace(SearchSpace.mbv3(), num_classes=10)
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


def test_layer_keys_round_trip_and_cover_arch(space):
    arch = sample_arch(space, 5)
    layers = space.layers(arch)
    assert [lay.kind for lay in layers[:2]] == ["stem", "first"] and layers[-1].kind == "head"
    assert sum(lay.kind == "mbconv" for lay in layers) == sum(arch.depths)
    for lay in layers:
        assert LayerSpec.from_key(lay.key) == lay
    assert layers[-2].in_hw == space.stage_input_hw(arch.resolution, space.num_stages)


def test_uniform_arch_makes_one_choice_everywhere(space):
    arch = space.uniform_arch(16, 5, 3, 2)
    assert arch == Arch(16, (2,) * space.num_stages, (5,) * space.num_slots, (3,) * space.num_slots)
    assert space.max_arch() == space.uniform_arch(20, 7, 4, 3) and space.min_arch(16) == space.uniform_arch(16, 3, 2, 1)
    assert space.validate(space.stamp(arch)).space == space.fingerprint()
