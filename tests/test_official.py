"""Importing official once-for-all checkpoints: exact parity with the official network's logits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import perturb

from ofa.cli import main
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.encoding import sample_arch
from ofa.families.mbv3.official import ImportConfig, import_official, to_official_state
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.utils.errors import OFAError, SpaceError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHECKPOINT = FIXTURES / "ofa_mbv3_w0.5_c10_random.pth"  # official code, width 0.5, 10 classes, random weights
EXPECTED = FIXTURES / "ofa_mbv3_w0.5_c10_expected.pt"  # the official network's logits for 12 subnets
ATOL = 1e-5


@pytest.fixture(scope="module")
def official_state() -> dict[str, torch.Tensor]:
    return torch.load(CHECKPOINT, weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def imported() -> OFAMobileNetV3:
    return import_official(CHECKPOINT).eval()


def _save(tmp_path: Path, state: dict, name: str = "ckpt.pth") -> Path:
    path = tmp_path / name
    torch.save({"state_dict": state}, path)
    return path


def _logits(net: OFAMobileNetV3, arch: Arch, x: torch.Tensor) -> torch.Tensor:
    net.set_active(arch)
    with torch.no_grad():
        return net(x)


def test_imported_supernet_and_extracted_subnets_match_official_logits(imported):
    expected = torch.load(EXPECTED, weights_only=True)
    space = imported.space
    assert space.stage_channels == (16, 24, 40, 56, 80)  # make_divisible(w * 0.5) of 24, 40, 80, 112, 160
    assert (space.stem_channels, space.final_expand_channels, space.feature_channels) == (8, 480, 640)
    assert (space.kernels, space.expands, space.depths, space.num_classes) == ((3, 5, 7), (3, 4, 6), (2, 3, 4), 10)
    assert len(expected["archs"]) == 12
    for config, x, official in zip(expected["archs"], expected["inputs"], expected["logits"]):
        arch = Arch.from_ofa_config(config, config["r"])
        supernet = _logits(imported, arch, x)
        with torch.no_grad():
            subnet = imported.extract(arch).eval()(x)
        assert official.abs().max() > 1.0  # logits of order 1-10: 1e-5 is a strict bound
        assert torch.allclose(supernet, official, rtol=0, atol=ATOL), (supernet - official).abs().max()
        assert torch.allclose(subnet, official, rtol=0, atol=ATOL), (subnet - official).abs().max()


def test_written_back_in_official_layout_is_the_fixture_bit_for_bit(imported, official_state):
    back = to_official_state(imported)
    assert sorted(back) == sorted(official_state)  # the official names
    for key, value in official_state.items():
        assert torch.equal(back[key], value), key


def test_old_style_key_names_import(tmp_path, imported, official_state):
    def old(key: str) -> str:
        key = key.replace(".bn.bn.", ".bn.").replace(".conv.conv.weight", ".conv.weight")
        key = key.replace("classifier.linear.", "classifier.linear.linear.")
        return key.replace(".conv.", ".mobile_inverted_conv.", 1) if key.startswith("blocks.") else key

    renamed = {old(k): v for k, v in official_state.items()}
    assert "blocks.1.mobile_inverted_conv.inverted_bottleneck.conv.weight" in renamed
    assert "classifier.linear.linear.weight" in renamed
    net = import_official(_save(tmp_path, renamed))
    assert net.space == imported.space
    for key, value in imported.state_dict().items():
        assert torch.equal(net.state_dict()[key], value), key


def test_fp16_checkpoint_imports_as_fp32(tmp_path, imported, official_state):
    half = {k: v.half() if v.is_floating_point() else v for k, v in official_state.items()}
    net = import_official(_save(tmp_path, half)).eval()
    assert net.space == imported.space
    for key, value in imported.state_dict().items():
        got = net.state_dict()[key]
        assert got.dtype == value.dtype
        assert torch.equal(got, value.half().to(value.dtype) if value.is_floating_point() else value), key
    arch = imported.space.max_arch(128)
    x = torch.randn(1, 3, 128, 128, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(_logits(net, arch, x), _logits(imported, arch, x), atol=0.05)


def test_own_supernet_at_untested_width_round_trips_through_official_layout(tmp_path):
    space = replace(SearchSpace.mbv3(), width_mult=0.75, num_classes=7, kernels=(3, 5), expands=(2, 4), depths=(1, 2))
    torch.manual_seed(0)
    net = perturb(OFAMobileNetV3(space), seed=3).eval()
    path = _save(tmp_path, to_official_state(net))
    back = import_official(path, ImportConfig(expands=(2, 4), depths=(1, 2))).eval()
    assert back.space.stage_channels == space.stage_channels
    assert (back.space.feature_channels, space.feature_channels) == (960, 960)
    assert [s.se for s in back.space.stages] == [s.se for s in space.stages]
    x = torch.randn(2, 3, 128, 128, generator=torch.Generator().manual_seed(1))
    for seed in range(3):
        arch = Arch(128, *(getattr(sample_arch(space, seed), f) for f in ("depths", "kernels", "expands")))
        assert torch.equal(_logits(back, arch, x), _logits(net, arch, x))


def _break(state: dict, kind: str) -> dict:
    state = dict(state)
    if kind == "missing key":
        del state["blocks.7.conv.depth_conv.bn.bn.running_var"]
    elif kind == "wrong shape":
        state["blocks.3.conv.point_linear.bn.bn.weight"] = torch.ones(17)
    elif kind == "expand width":
        state["blocks.2.conv.inverted_bottleneck.conv.conv.weight"] = torch.ones(40, 16, 1, 1)
    elif kind == "kernel chain":
        state["blocks.1.conv.depth_conv.conv.9to7_matrix"] = torch.eye(49)
    elif kind == "unexpected key":  # SE in the second block of a stage without SE
        state["blocks.2.conv.depth_conv.se.fc.reduce.weight"] = torch.ones(8, 32, 1, 1)
    elif kind == "other network":  # OFA-ResNet50-like names
        state = {"input_stem.0.conv.weight": torch.ones(32, 3, 3, 3), "blocks.0.conv1.conv.weight": torch.ones(8)}
    elif kind == "proxyless":  # OFA-ProxylessNAS has no final expand layer
        state = {k: v for k, v in state.items() if not k.startswith("final_expand_layer.")}
    elif kind == "block count":
        state = {k: v for k, v in state.items() if not k.startswith("blocks.20.")}
    return state


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("missing key", "missing key 'blocks.7.conv.depth_conv.bn.running_var'"),
        ("wrong shape", "blocks.3.conv.point_linear.bn.weight has shape [17], expected [16]"),
        ("expand width", "match no integer expand ratio"),
        ("kernel chain", "matrices ['5to3', '7to5', '9to7'] do not form a chain from the 7x7 kernel"),
        ("unexpected key", "unexpected key 'blocks.2.conv.depth_conv.se.fc.reduce.weight'"),
        ("other network", "not an OFA-MobileNetV3 checkpoint (no first_conv.conv.weight"),
        ("proxyless", "not an OFA-MobileNetV3 checkpoint (no final_expand_layer.conv.weight"),
        ("block count", "19 elastic blocks"),
    ],
)
def test_bad_checkpoints_give_one_line(tmp_path, official_state, kind, needle):
    path = _save(tmp_path, _break(official_state, kind))
    with pytest.raises(OFAError) as err:
        import_official(path)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert str(path) in str(err.value)


def test_unreadable_and_foreign_files_give_one_line(tmp_path, capsys):
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(CHECKPOINT.read_bytes()[:100_000])
    ours = OFAMobileNetV3(replace(SearchSpace.mbv3(), width_mult=0.5, num_classes=3)).save(tmp_path / "ours.pt")
    pickled = tmp_path / "pickled.pth"  # a global a weights-only load refuses, as other tools' checkpoints hold
    torch.save({"epoch": np.float64(3.0)}, pickled)
    text = tmp_path / "notes.pth"
    text.write_text("not a checkpoint")
    for path, needle in (
        (truncated, "corrupted or truncated"),
        (pickled, "a weights-only load refuses (Unsupported global: GLOBAL numpy"),
        (text, "a weights-only load refuses (Unsupported operand"),
        (EXPECTED, "'archs' is a list, not a tensor"),
        (ours, "already an ofa-supernet file"),
        (tmp_path / "nope.pth", "not found"),
    ):
        assert main(["import", str(path), "--out", str(tmp_path / "out.pt")]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], lines
        assert "weights_only" not in lines[0]  # not torch's advice to load it unsafely
    assert not (tmp_path / "out.pt").exists()


def test_choice_overrides_must_keep_the_checkpoints_largest():
    with pytest.raises(OFAError, match=r"--expands: the largest choice must be 6"):
        import_official(CHECKPOINT, ImportConfig(expands=(3, 4)))
    net = import_official(CHECKPOINT, ImportConfig(expands=(2, 6), depths=(1, 4)))
    assert (net.space.expands, net.space.depths) == ((2, 6), (1, 4))


def test_cli_import_reheads_folds_and_carries_preprocessing(tmp_path, imported, capsys):
    out = tmp_path / "digits.pt"
    assert main(["import", str(CHECKPOINT), "--out", str(out), "--num-classes", "4", "--in-channels", "1"]) == 0
    assert "wrote" in capsys.readouterr().out
    net = OFAMobileNetV3.load(out).eval()
    assert (net.space.in_channels, net.space.num_classes) == (1, 4)
    assert (net.meta["interpolation"], net.meta["crop_pct"]) == ("bilinear", 0.875)
    assert net.meta["mean"] == [pytest.approx(0.449)] and net.meta["std"] == [pytest.approx(0.226)]
    assert "required" in net.meta["bn_recalibration"]
    assert net.meta["imported_from"]["file"] == CHECKPOINT.name
    same = [k for k in imported.state_dict() if not k.startswith(("classifier.", "conv_stem."))]
    assert all(torch.equal(net.state_dict()[k], imported.state_dict()[k]) for k in same)
    # A gray image through the folded stem = the same image as RGB through the original stem.
    gray = torch.randn(1, 1, 128, 128, generator=torch.Generator().manual_seed(2))
    arch = net.space.max_arch(128)
    net.set_active(arch)
    imported.set_active(arch)
    with torch.no_grad():
        folded = net.blocks[0](net.bn1(net.conv_stem(gray)))
        rgb = imported.blocks[0](imported.bn1(imported.conv_stem(gray.expand(1, 3, 128, 128))))
    assert torch.allclose(folded, rgb, atol=1e-5)


def test_arch_from_and_to_ofa_config():
    config = {"ks": [3, 5, 7, 3] * 5, "e": [3, 4, 6, 4] * 5, "d": [2, 3, 4, 2, 3]}
    for resolution in (224, [224]):
        arch = Arch.from_ofa_config(config, resolution)
        assert arch == Arch(224, (2, 3, 4, 2, 3), tuple(config["ks"]), tuple(config["e"]))
    assert arch.to_ofa_config() == {**config, "r": 224}
    assert Arch.from_ofa_config({**config, "r": [160]}).resolution == 160
    assert Arch.from_ofa_config({**config, "e": [6.0] * 20}, 128).expands == (6,) * 20
    SearchSpace.mbv3().validate(arch)
    for bad, needle in (
        ({**config, "e": [3] * 19}, "ks has 20 entries but e has 19"),
        ({**config, "d": [2, 3, 5, 2, 3]}, "d[2]: 5 is outside 1..4"),
        ({"ks": config["ks"], "d": config["d"]}, "missing field 'e'"),
        ({**config, "ks": [3.5] * 20}, "ks[0]: expected an integer"),
    ):
        with pytest.raises(SpaceError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            Arch.from_ofa_config(bad, 224)
    with pytest.raises(SpaceError, match="expected one resolution"):
        Arch.from_ofa_config(config, [224, 192])
