"""Importing official OFA-ResNet50 checkpoints: exact parity with the official network's logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ofa.families.resnet.arch import ResNetArch
from ofa.families.resnet.official import (
    ImportConfig,
    import_official,
    infer_space,
    matches,
    official_key_map,
    read_official,
)
from ofa.families.resnet.space import ResNetSpace
from ofa.families.resnet.supernet import OFAResNet
from ofa.families.resnet.transfer import adapt_supernet, derive_space
from ofa.utils.errors import OFAError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# official OFAResNets(n_classes=10, depth_list=[0,1,2], expand_ratio_list=[0.2,0.25,0.35],
# width_mult_list=[0.1,0.15,0.2]) with perturbed random weights, and its logits for 8 subnets
CHECKPOINT = FIXTURES / "ofa_resnet50_w0.1-0.15-0.2_c10_random.pth"
EXPECTED = FIXTURES / "ofa_resnet50_w0.1-0.15-0.2_c10_expected.pt"
WIDTHS = ImportConfig(widths=(0.1, 0.15, 0.2))
ATOL = 1e-5


@pytest.fixture(scope="module")
def imported() -> OFAResNet:
    return import_official(CHECKPOINT, WIDTHS).eval()


@pytest.fixture(scope="module")
def expected() -> dict:
    return torch.load(EXPECTED, weights_only=True)


def _save(tmp_path: Path, state: dict) -> Path:
    path = tmp_path / "ckpt.pth"
    torch.save({"state_dict": state}, path)
    return path


def test_inferred_space_is_the_official_constructor(imported, expected):
    kwargs = expected["net_kwargs"]
    space = imported.space
    assert space.widths == tuple(kwargs["width_mult_list"])
    assert space.expands == tuple(kwargs["expand_ratio_list"])
    assert space.depths == tuple(kwargs["depth_list"])
    assert (space.num_classes, space.in_channels) == (kwargs["n_classes"], 3)
    assert imported.meta["imported_from"]["code"] == "mit-han-lab/once-for-all OFAResNets"


def test_every_fixture_subnet_matches_the_official_logits(imported, expected):
    """Supernet and extracted timm ByobNet both give the official network's eval-mode logits."""
    assert len(expected["archs"]) >= 6
    for config, x, logits in zip(expected["archs"], expected["inputs"], expected["logits"]):
        arch = ResNetArch.from_ofa_config(config)
        assert arch.to_ofa_config() == {**config, "e": [float(e) for e in config["e"]]}
        imported.set_active(arch)
        sub = imported.extract(arch).eval()
        with torch.no_grad():
            assert (imported(x) - logits).abs().max() <= ATOL, config
            assert (sub(x) - logits).abs().max() <= ATOL, config


def test_official_names_of_static_layers_load_too(tmp_path, expected):
    """The official loader's own renaming: static subnets write ``bn.`` and ``conv.weight`` unnested."""
    state = torch.load(CHECKPOINT, weights_only=True)["state_dict"]
    flat = {k.replace(".bn.bn.", ".bn.").replace(".linear.linear.", ".linear."): v for k, v in state.items()}
    net = import_official(_save(tmp_path, flat), WIDTHS).eval()
    arch = ResNetArch.from_ofa_config(expected["archs"][2])
    net.set_active(arch)
    with torch.no_grad():
        assert (net(expected["inputs"][2]) - expected["logits"][2]).abs().max() <= ATOL


def test_matches_tells_resnet_from_other_families():
    state = torch.load(CHECKPOINT, weights_only=True)["state_dict"]
    assert matches(state)
    mbv3_like = {"first_conv.conv.weight": 0, "blocks.0.conv.depth_conv.conv.weight": 0, "classifier.linear.weight": 0}
    assert not matches(mbv3_like)


def test_widths_the_shapes_cannot_tell_are_asked_for():
    with pytest.raises(OFAError, match=r"widths \[8, 16, 48, 104, 208, 408\].*--widths"):
        import_official(CHECKPOINT)
    with pytest.raises(OFAError, match="expands / --expands"):
        import_official(CHECKPOINT, ImportConfig(widths=WIDTHS.widths, expands=(0.2, 0.25)))
    with pytest.raises(OFAError, match="the largest must be 2"):
        import_official(CHECKPOINT, ImportConfig(widths=WIDTHS.widths, depths=(0, 1)))
    with pytest.raises(OFAError, match="widths / --widths: expected positive numbers"):
        ImportConfig(widths=(0.0, 0.2))


def test_published_space_is_inferred_without_flags():
    """The published ofa_resnet50 shapes (our supernet's, on the meta device, under official names) need no flags."""
    space = ResNetSpace.ofa_resnet50()
    with torch.device("meta"):
        ours = OFAResNet(space).state_dict()
    state = {
        official: torch.empty(ours[mine].shape, device="meta") for official, mine in official_key_map(space).items()
    }
    assert infer_space(state, "published") == space


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"input_stem.0.conv.weight": torch.zeros(1)}, "not an OFA-ResNet checkpoint"),
        ({"blocks.0.conv1.conv.weight": "x"}, "is a str, not a tensor"),
    ],
)
def test_bad_checkpoints_give_one_line_errors(tmp_path, state, message):
    with pytest.raises(OFAError, match=message) as err:
        read_official(_save(tmp_path, state))
    assert "\n" not in str(err.value)


def test_truncated_checkpoint_names_the_missing_key(tmp_path):
    state = torch.load(CHECKPOINT, weights_only=True)["state_dict"]
    del state["blocks.3.conv2.bn.bn.running_var"]
    with pytest.raises(OFAError, match=r"missing key 'blocks\.3\.conv2\.bn\.running_var'"):
        import_official(_save(tmp_path, state), WIDTHS)


def test_import_with_transfer_surgery(imported):
    """A fresh 3-way classifier and a grayscale stem; every other weight is the official one."""
    net = import_official(CHECKPOINT, ImportConfig(widths=WIDTHS.widths, num_classes=3, in_channels=1)).eval()
    assert (net.space.num_classes, net.space.in_channels) == (3, 1)
    assert net.meta["fresh_classifier"] and len(net.meta["mean"]) == 1
    rgb = imported.stem.conv1.conv.weight
    assert torch.allclose(net.stem.conv1.conv.weight, rgb.sum(1, keepdim=True))
    assert torch.equal(net.stages[3][1].conv2_kxk.conv.weight, imported.stages[3][1].conv2_kxk.conv.weight)
    with torch.no_grad():
        assert net(torch.randn(2, 1, 64, 64)).shape == (2, 3)


def test_derived_spaces_change_only_what_the_weights_allow(imported):
    base = imported.space
    derived = derive_space(base, {"num_classes": 4, "resolutions": [64]})
    assert (derived.num_classes, derived.resolutions) == (4, (64,))
    assert adapt_supernet(imported, derived).head.fc.weight.shape == (4, 408)
    with pytest.raises(OFAError, match=r"space\.widths: differs from the starting supernet's"):
        derive_space(base, {"widths": [0.2]})
