"""The update-rule benchmark: a proxy of the ImageNet ResNet recipe where the two rules differ, and its verdict."""

from __future__ import annotations

from helpers import fake_fashion

from bench.digits_schedule import binomial_se
from bench.update_rule import SUBNETS_PER_STEP, proxy_recipe, summarize
from ofa.train.recipe import load_recipe, recipe_from_dict

PAPER = {"largest": 90.0, "smallest": 80.0, "random": 85.0}  # the paper rule's validation figures


def _row(rule: str, seed: int, largest: float, smallest: float, random: float) -> dict:
    return {
        "rule": rule,
        "seed": seed,
        "val_largest": largest,
        "val_smallest": smallest,
        "val_random": random,
        "train_seconds": 2.0,
    }


def test_the_proxy_trains_without_the_sandwich_as_the_imagenet_recipe_does(tmp_path):
    for split in ("train", "val"):
        (tmp_path / split).mkdir()
    imagenet = load_recipe("recipes/imagenet_resnet50.yaml", [f"data.root={tmp_path}"])
    imagenet = {p.name: p for p in imagenet.phases}
    fake_fashion(tmp_path / "fashion", gz=False)  # the recipe checks its files exist (this machine may lack them)
    for rule in ("all", "used"):
        proxy = proxy_recipe(rule, 3)
        recipe = recipe_from_dict({**proxy, "data": {**proxy["data"], "root": str(tmp_path / "fashion")}}, "proxy")
        assert recipe.optimizer.update == rule and recipe.data.val_seed == 3 and recipe.data.name == "fashion_mnist"
        assert not any(p.sandwich for p in recipe.phases) and not any(p.sandwich for p in imagenet.values())
        for phase in recipe.phases:
            assert phase.subnets_per_step == SUBNETS_PER_STEP.get(phase.name, 1)
            if phase.name in imagenet:
                assert phase.subnets_per_step == imagenet[phase.name].subnets_per_step
    assert proxy_recipe("all", 0)["phases"] == proxy_recipe("used", 0)["phases"]


def test_used_passes_within_one_standard_error_of_the_paper_rule():
    rows = [_row("all", s, *PAPER.values()) for s in (0, 1)]
    rows += [_row("used", 0, 89.8, 80.5, 84.9), _row("used", 1, 89.6, 80.5, 84.7)]
    summary = summarize(rows, [0, 1], 5000)
    assert summary["by_rule"]["used"]["val_largest"] == 89.7
    assert summary["bar"] == {k: round(v - binomial_se(v, 5000), 2) for k, v in PAPER.items()}
    assert summary["bar"]["largest"] == 89.58
    assert summary["used_passes"]
    worse = rows[:2] + [_row("used", s, 89.0, 80.5, 85.0) for s in (0, 1)]
    assert not summarize(worse, [0, 1], 5000)["used_passes"]


def test_an_unfinished_rule_gets_no_verdict():
    summary = summarize([_row("all", 0, 90.0, 80.0, 85.0), _row("used", 0, 90.0, 80.0, 85.0)], [0, 1], 5000)
    assert summary["by_rule"] == {} and "used_passes" not in summary
