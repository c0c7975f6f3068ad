"""The family registry and the family-neutral parts every family shares: dispatch by the ``family:`` key,
one-line errors, and a DenseCost over cost terms whose costs depend on more than one gene column."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

from ofa.families import registry
from ofa.families.family import Family
from ofa.families.genes import CostTerm, GeneLayoutBase, frozen_ints
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.space import SearchSpace
from ofa.utils.errors import OFAError, SpaceError
from search.dense import DenseCost


@dataclass(frozen=True)
class ToyLayer:
    macs: int


@dataclass(frozen=True)
class ToySpace:
    """Two stages of width choices; the second stage's cost depends on the first's width (as ResNet's)."""

    resolutions: tuple[int, ...] = (8, 16)
    widths: tuple[int, ...] = (1, 2, 3)


@dataclass(frozen=True, eq=False)
class ToyLayout(GeneLayoutBase):
    def encode(self, arch, source="arch"):
        return np.array([self.choices[i].index(v) for i, v in enumerate(arch)], dtype=np.int64)

    def decode(self, row):
        return tuple(self.choices[i][int(g)] for i, g in enumerate(row))

    def active(self, rows):
        return np.ones(self.as_rows(rows).shape, dtype=bool)

    @property
    def terms(self):
        return (
            CostTerm((0,), lambda r: [ToyLayer(r)]),
            CostTerm((0, 1), lambda r, w: [ToyLayer(r * w)]),
            CostTerm((0, 1, 2), lambda r, w_in, w: [ToyLayer(100 * r * w_in * w), ToyLayer(1)]),
        )

    def term_active(self, rows):
        rows = self.as_rows(rows)
        return np.stack([np.ones(len(rows), bool), np.ones(len(rows), bool), rows[:, 2] > 0], axis=1)


def toy_layout(space: ToySpace) -> ToyLayout:
    choices = (space.resolutions, space.widths, space.widths)
    slices = {"resolution": slice(0, 1), "widths": slice(1, 3)}
    return ToyLayout(space, slices, choices, frozen_ints([len(c) for c in choices]))


@pytest.fixture
def toy(monkeypatch):
    fields = {f: None for f in Family.__dataclass_fields__ if f not in ("name", "space_type", "layout")}
    family = Family(name="toy", space_type=ToySpace, layout=toy_layout, **fields)
    monkeypatch.setitem(registry._FAMILIES, "toy", family)
    return family


def test_terms_over_several_columns_sum_exactly(toy):
    space = ToySpace()
    dense = DenseCost.from_layer_cost(space, lambda layer: layer.macs, overhead=0.5)
    assert [t.shape for t in dense.tables] == [(2, 3), (2, 3, 3)]
    rows = np.array(list(itertools.product(range(2), range(3), range(3))))
    expected = []
    for ri, wi, k in rows:
        r, w_in, w = space.resolutions[ri], space.widths[wi], space.widths[k]
        expected.append(0.5 + r + r * w_in + ((100 * r * w_in * w + 1) if k > 0 else 0))
    assert dense.predict_batch(rows).tolist() == expected
    scaled = dense.affine(np.array([2.0, 3.0]), np.array([0.25, 0.0]))
    assert scaled.predict_batch(rows).tolist() == [
        (2.0 if ri == 0 else 3.0) * e + (0.25 if ri == 0 else 0.0) for (ri, _, _), e in zip(rows, expected)
    ]


def test_a_space_without_family_key_is_mbv3_and_round_trips():
    space = SearchSpace.mbv3()
    assert "family" not in space.to_dict()
    assert registry.space_from_dict(space.to_dict()) == space
    assert registry.space_from_dict({**space.to_dict(), "family": "mbv3"}).fingerprint() == space.fingerprint()
    assert registry.family_of(space).name == "mbv3" and registry.get_family("mbv3").space_type is SearchSpace
    arch = space.stamp(space.max_arch())
    assert registry.arch_from_dict(space, arch.to_dict()) == arch


def test_unknown_or_foreign_families_are_one_line_errors(toy, tmp_path):
    known = ", ".join(registry.family_names())  # mbv3 first, the toy last
    assert known.startswith("mbv3, ") and known.endswith(", toy")
    with pytest.raises(OFAError, match=rf"^recipe\.family: unknown family 'resnet9' \(known: {known}\)$"):
        registry.space_from_dict({"family": "resnet9"}, "recipe")
    space = SearchSpace.mbv3()
    with pytest.raises(SpaceError, match="an arch of family 'toy', but the space is of family 'mbv3'"):
        registry.arch_from_dict(space, {**space.max_arch().to_dict(), "family": "toy"}, "a.json")
    with pytest.raises(OFAError, match="not the space of a registered family"):
        registry.family_of(object())
    with pytest.raises(OFAError, match="registered twice"):
        registry.register(toy)
    with pytest.raises(SpaceError, match="arch file not found"):
        registry.load_arch(space, tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SpaceError, match=r"bad\.json: invalid JSON"):
        registry.load_arch(space, tmp_path / "bad.json")


def test_official_configs_and_arch_files_read_by_the_spaces_family(tmp_path):
    space = SearchSpace.mbv3()
    arch = space.max_arch(160)
    official = registry.arch_from_any(space, arch.to_ofa_config(), "cfg")
    assert official == arch and isinstance(official, Arch)
    assert registry.load_arch(space, arch.save(tmp_path / "a.json")) == arch
