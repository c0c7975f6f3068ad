"""Recipe schema: the shipped recipes validate, bad values are one clear line naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import TINY_RECIPE as TINY

from ofa.cli import main
from ofa.train import load_recipe
from ofa.train.recipe import recipe_from_dict
from ofa.utils.errors import OFAError

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "recipes" / "digits.yaml"


def test_digits_recipe_resolves_every_phase():
    r = load_recipe(DIGITS)
    assert [p.name for p in r.phases] == ["full", "elastic"]
    full, elastic = r.phases
    assert tuple(full.choices[d] for d in ("kernels", "expands", "depths")) == ((5,), (4,), (3,))
    assert full.resolutions == (12, 16)  # null/omitted -> all of the space
    # one phase opens every dimension at once (omitted: all of the space's)
    assert tuple(elastic.choices[d] for d in ("kernels", "expands", "depths")) == ((3, 5), (2, 3, 4), (1, 2, 3))
    assert elastic.reorganize_channels and elastic.sandwich and elastic.subnets_per_step == 3
    assert r.data.name == "digits" and r.space.num_classes == 10
    assert r.distill.teacher == "inplace" and r.teacher_phase_index is None  # no frozen teacher network


def test_imagenet_recipe_follows_the_official_schedule(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    r = load_recipe(ROOT / "recipes" / "imagenet_mbv3.yaml", [f"data.root={tmp_path}"])
    got = [
        (p.name, *[p.choices[d] for d in ("kernels", "expands", "depths")], p.subnets_per_step, p.epochs, *p_tail)
        for p in r.phases
        for p_tail in [(p.warmup_epochs, p.lr)]
    ]
    assert got == [
        ("full", (7,), (6,), (4,), 1, 180, 0, 2.6),
        ("kernel", (3, 5, 7), (6,), (4,), 1, 120, 5, 0.96),
        ("depth_1", (3, 5, 7), (6,), (3, 4), 2, 25, 0, 0.08),
        ("depth_2", (3, 5, 7), (6,), (2, 3, 4), 2, 120, 5, 0.24),
        ("expand_1", (3, 5, 7), (4, 6), (2, 3, 4), 4, 25, 0, 0.08),
        ("expand_2", (3, 5, 7), (3, 4, 6), (2, 3, 4), 4, 120, 5, 0.24),
    ]
    assert r.phases[4].reorganize_channels
    assert r.optimizer.lr_reference_batch == 2048 and r.optimizer.nesterov and r.optimizer.momentum == 0.9
    assert r.optimizer.weight_decay == 3e-5 and r.optimizer.label_smoothing == 0.1
    assert r.space.resolutions == tuple(range(128, 225, 4)) and r.space.dropout == 0.1
    assert r.distill.teacher == "full" and r.distill.ratio == 1.0


def test_cifar_recipe_validates_with_a_local_root(tmp_path):
    r = load_recipe(ROOT / "recipes" / "cifar10.yaml", [f"data.root={tmp_path}"])
    assert r.data.name == "CIFAR10" and r.data.root == str(tmp_path)
    assert r.space.in_channels == 3 and max(r.space.resolutions) <= r.data.image_size


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["data.colour=1"], "data.colour: unknown key"),
        (["optimiser={}"], "optimiser: unknown key"),
        (["data.batch_size=many"], "data.batch_size: expected an integer, got 'many'"),
        (["phases.depth.subnets_per_step=2.5"], "phases[1].subnets_per_step: expected an integer"),
        (["phases.depth.kernels=[3, 7]"], "phases[1].kernels[1]: 7 is not one of space.kernels [3, 5]"),
        (["phases.0.resolutions=[10]"], "phases[0].resolutions[0]: 10 is not one of space.resolutions"),
        (["distill.teacher=teachers"], "distill.teacher: 'teachers' is not one of 'none', 'full', 'inplace'"),
        (["schedule.micro_batches=3"], "schedule.micro_batches: 3 must be >= 1 and divide data.batch_size"),
        (["space.kernels=[3, 4]"], "kernels: kernel sizes must be odd"),
        (["data.name=imagefolder", "data.root=/nonexistent/images"], "data.root: /nonexistent/images does not exist"),
        (["data.name=CIFAR10"], "data.root: required for dataset 'CIFAR10'"),
        (["data.name=cifar11"], "data.name: 'cifar11' is not digits, synthetic, imagefolder or a torchvision dataset"),
        (["checkpoint.keep=1"], "checkpoint.keep: must be >= 2"),
        (["phases.expand.sandwich=true", "phases.expand.subnets_per_step=1"], "phases[2].sandwich: needs"),
        (["phases.depth.corner_resolutions=true"], "phases[1].corner_resolutions: needs sandwich: true"),
        (["distill.teacher_phase=warmup"], "distill.teacher_phase: 'warmup' is not a phase name"),
        (["phases.0.lr=-1"], "phases[0].lr: must be positive"),
    ],
)
def test_bad_values_name_the_file_and_the_key(overrides, expected):
    with pytest.raises(OFAError) as err:
        load_recipe(TINY, overrides)
    message = str(err.value)
    assert message.startswith(f"{TINY}: ") and expected in message, message
    assert "\n" not in message


def test_missing_data_root_of_a_shipped_recipe(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the recipe's relative root data/cifar10 does not exist here
    with pytest.raises(OFAError, match=r"cifar10\.yaml: data\.root: .*data/cifar10 does not exist"):
        load_recipe(ROOT / "recipes" / "cifar10.yaml")


def test_overrides_by_phase_name_and_index_and_yaml_values():
    r = load_recipe(
        TINY,
        [
            "phases.depth.epochs=3",
            "phases.0.lr=0.2",
            "optimizer.weight_decay=1e-4",
            "data.synthetic.noise=0.5",
            "eval.subnets=corners",
        ],
    )
    assert r.phases[1].epochs == 3 and r.phases[0].lr == 0.2
    assert r.optimizer.weight_decay == 1e-4  # YAML reads 1e-4 as a string; the schema takes it as a number
    assert r.data.synthetic.noise == 0.5 and r.eval.subnets == "corners"
    for bad in (["phases.9.lr=1"], ["nokey"], ["seed.x.y=1"]):
        with pytest.raises(OFAError):
            load_recipe(TINY, bad)


def test_resolved_recipe_round_trips(tmp_path):
    r = load_recipe(TINY)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(r.to_dict(), sort_keys=False))
    again = load_recipe(path)
    assert again == r and again.to_dict() == r.to_dict()
    assert recipe_from_dict(r.to_dict()) == r


def test_cli_reports_a_bad_recipe_in_one_line(capsys, tmp_path):
    status = main(["train", str(TINY), "--out", str(tmp_path / "run"), "--set", "data.batch_size=many"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("ofa train: error: ") and "data.batch_size" in err
    assert not (tmp_path / "run").exists()  # validated before any work

    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("space: [unclosed\n")
    assert main(["train", str(bad_yaml)]) == 2
    assert "invalid YAML" in capsys.readouterr().err
