"""Importing official OFA-ProxylessNAS checkpoints: exact parity with the official network's logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ofa.families.importing import import_official_file
from ofa.families.mbv3.official_shapes import ImportConfig
from ofa.families.proxyless.arch import ProxylessArch
from ofa.families.proxyless.official import import_official, matches
from ofa.families.proxyless.supernet import OFAProxylessNAS
from ofa.utils.errors import OFAError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHECKPOINT = FIXTURES / "ofa_proxyless_w0.5_c10_random.pth"  # official code, width 0.5, 10 classes, random weights
EXPECTED = FIXTURES / "ofa_proxyless_w0.5_c10_expected.pt"  # the official network's logits for 8 subnets
MBV3_CHECKPOINT = FIXTURES / "ofa_mbv3_w0.5_c10_random.pth"
ATOL = 1e-5


@pytest.fixture(scope="module")
def official_state() -> dict[str, torch.Tensor]:
    return torch.load(CHECKPOINT, weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def imported() -> OFAProxylessNAS:
    return import_official(CHECKPOINT).eval()


def _save(tmp_path: Path, state: dict, name: str = "ckpt.pth") -> Path:
    path = tmp_path / name
    torch.save({"state_dict": state}, path)
    return path


def test_every_fixture_subnet_matches_the_official_logits(imported):
    expected = torch.load(EXPECTED, weights_only=True)
    assert expected["family"] == "proxyless" and len(expected["archs"]) == 8
    for config, x, official in zip(expected["archs"], expected["inputs"], expected["logits"]):
        arch = ProxylessArch.from_ofa_config(config)
        imported.set_active(arch)
        with torch.no_grad():
            supernet = imported(x)
            subnet = imported.extract(arch).eval()(x)
        assert official.abs().max() > 1.0  # logits of order 1-10: 1e-5 is a strict bound
        assert (supernet - official).abs().max() <= ATOL, config
        assert (subnet - official).abs().max() <= ATOL, config


def test_space_is_inferred_from_the_shapes(imported, official_state):
    space = imported.space
    assert space.stage_channels == (16, 24, 40, 48, 96, 160)  # make_divisible(0.5 * 24/40/80/96/192/320)
    assert (space.stem_channels, space.first_channels, space.feature_channels) == (16, 8, 640)
    assert (space.kernels, space.expands, space.depths, space.num_classes) == ((3, 5, 7), (3, 4, 6), (2, 3, 4), 10)
    assert tuple(s.stride for s in space.stages) == (2, 2, 2, 1, 2, 1)
    assert imported.meta["imported_from"]["file"] == CHECKPOINT.name and "bn_recalibration" in imported.meta
    assert matches(official_state)
    assert not matches(torch.load(MBV3_CHECKPOINT, weights_only=True)["state_dict"])


def test_import_file_writes_a_loadable_supernet(tmp_path, imported):
    result = import_official_file(CHECKPOINT, tmp_path / "net.safetensors", {})
    assert result.family.name == "proxyless"
    loaded = OFAProxylessNAS.load(result.out).eval()
    arch = loaded.space.min_arch()
    x = torch.randn(1, 3, arch.resolution, arch.resolution)
    imported.set_active(arch)
    loaded.set_active(arch)
    with torch.no_grad():
        assert torch.equal(loaded(x), imported(x))
    assert result.tensors == len(loaded.state_dict())


def test_choice_lists_and_transfer_surgery(official_state):
    net = import_official(CHECKPOINT, ImportConfig(depths=(3, 4), expands=(4, 6)))
    assert (net.space.depths, net.space.expands) == ((3, 4), (4, 6))
    with pytest.raises(OFAError, match=r"^depths / --depths: the largest choice must be 4"):
        import_official(CHECKPOINT, ImportConfig(depths=(2, 3)))
    adapted = import_official(CHECKPOINT, ImportConfig(num_classes=5, in_channels=1))
    state = adapted.state_dict()
    assert state["classifier.weight"].shape == (5, 640) and adapted.meta["fresh_classifier"]
    assert torch.allclose(state["conv_stem.weight"][:, 0], official_state["first_conv.conv.weight"].sum(1))
    assert torch.equal(state["conv_head.weight"], official_state["feature_mix_layer.conv.weight"])
    assert len(adapted.meta["mean"]) == 1


def test_bad_checkpoints_are_one_line_errors(tmp_path, official_state):
    wrong_shape = dict(official_state)
    key = "blocks.3.conv.point_linear.conv.conv.weight"
    wrong_shape[key] = torch.zeros(8, *wrong_shape[key].shape[1:])
    missing = {k: v for k, v in official_state.items() if k != "blocks.2.conv.depth_conv.bn.bn.weight"}
    no_block = {k: v for k, v in official_state.items() if not k.startswith("blocks.21.")}
    text = tmp_path / "notes.pth"
    text.write_text("not a checkpoint")
    cases = [
        (_save(tmp_path, wrong_shape, "shape.pth"), r"blocks\.3\.conv\.point_linear\.conv\.weight has shape \[8, "),
        (_save(tmp_path, missing, "missing.pth"), r"missing key 'blocks\.2\.conv\.depth_conv\.bn\.weight'"),
        (_save(tmp_path, no_block, "blocks.pth"), "20 elastic blocks"),
        (MBV3_CHECKPOINT, "not an OFA-ProxylessNAS checkpoint"),
        (text, "not a readable official OFA checkpoint"),
        (_save(tmp_path, {"x": 1}, "plain.pth"), r"entry 'x' is a int, not a tensor"),
        (tmp_path / "absent.pth", "not found"),
    ]
    for path, message in cases:
        with pytest.raises(OFAError, match=message) as info:
            import_official(path)
        assert "\n" not in str(info.value) and str(path) in str(info.value)
