"""Arch JSON: round trips, one-line errors, and the space fingerprint an arch file carries."""

import json

import pytest
from helpers import tiny_space

from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.encoding import sample_arch
from ofa.utils.errors import SpaceError


def test_json_round_trip(tmp_path, space):
    arch = sample_arch(space, 3).with_extra({"predicted_top1": 91.5, "latency_ms": 4.2})
    path = arch.save(tmp_path / "a.json")
    back = Arch.load(path)
    assert back == arch and back.extra == {"predicted_top1": 91.5, "latency_ms": 4.2}
    assert json.loads(path.read_text())["kernels"] == list(arch.kernels)
    assert len(arch.kernels) == len(arch.expands) == space.num_slots == 9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "invalid JSON"),
        ('{"resolution": 16, "depths": [1], "kernels": [3]}', "missing field 'expands'"),
        ('{"resolution": "16", "depths": [1], "kernels": [3], "expands": [2]}', "'resolution' must be an integer"),
        ('{"resolution": 16, "depths": [1.5], "kernels": [3], "expands": [2]}', "'depths' must be a list of int"),
        ('{"resolution": 16, "depths": [1], "kernels": [3], "expands": [2], "space": 7}', "'space' must be a space"),
    ],
)
def test_arch_json_errors(text, message):
    with pytest.raises(SpaceError) as err:
        Arch.from_json(text, "a.json")
    assert message in str(err.value) and str(err.value).startswith("a.json")


def test_fingerprint_travels_with_the_file(tmp_path, space):
    plain = sample_arch(space, 4)
    assert "space" not in plain.to_dict() and plain.space is None
    stamped = space.stamp(plain).with_extra({"latency_ms": 1.5})
    path = stamped.save(tmp_path / "arch.json")
    assert json.loads(path.read_text())["space"] == space.fingerprint()
    back = Arch.load(path)
    assert back.space == space.fingerprint() and back.extra == {"latency_ms": 1.5}
    assert back == plain and hash(back) == hash(plain)  # the fingerprint names the space, not the subnet
    assert space.validate(back, str(path)) is back
    other = tiny_space(stem_width=16)
    with pytest.raises(SpaceError) as err:
        other.validate(back, str(path))
    assert str(err.value) == (
        f"{path}: the arch was chosen in space {space.fingerprint()}, but this space is {other.fingerprint()}"
    )
    assert other.check_choices(back) is back  # its values alone fit: only the fingerprint tells them apart
