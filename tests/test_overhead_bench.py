"""`bench.elastic_overhead` and `bench.official_overhead` time each subnet's supernet step next to
its static twin's."""

import copy
import functools
import json
import sys
import textwrap
import time

import pytest
import torch
from helpers import tiny_space
from torch.optim.optimizer import register_optimizer_step_pre_hook

from bench import elastic_breakdown, elastic_overhead, official_overhead, run_all
from bench.step_timing import StepTimes, summarize
from ofa.families.mbv3.elastic import ElasticSqueezeExcite
from ofa.families.mbv3.supernet import OFAMobileNetV3


class ForwardClock:
    """A clock that moves only when a model runs forward, by that model's known cost: step times with a known
    answer."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def charge(self, model: torch.nn.Module, cost) -> None:
        """Each forward of ``model`` advances the clock by ``cost()``."""

        def advance(module, inputs):
            self.now += cost()

        model.register_forward_pre_hook(advance)


def test_each_round_times_both_sides_and_trains_both():
    torch.manual_seed(0)
    space = tiny_space()
    supernet = OFAMobileNetV3(space).train()
    archs = {"max": space.max_arch(12), "min": space.min_arch(12)}
    runs = {}
    for name, arch in archs.items():
        static = supernet.extract(arch).train()
        runs[name] = (arch, static, torch.optim.SGD(static.parameters(), lr=0.1, momentum=0.9))
    before = {name: static.conv_stem.weight.clone() for name, (_, static, _) in runs.items()}
    stem = supernet.conv_stem.weight.clone()
    x, y = torch.randn(4, 3, 12, 12), torch.randint(0, space.num_classes, (4,))
    clock, cost = ForwardClock(), {"max": (5.5, 3.5), "min": (2.5, 0.5)}  # forward seconds: (supernet, twin)
    clock.charge(supernet, lambda: cost["max" if supernet.active_arch == archs["max"] else "min"][0])
    for name, (_, static, _) in runs.items():
        clock.charge(static, lambda name=name: cost[name][1])

    def update(optimizer, args, kwargs):  # every optimizer step: half a second
        clock.now += 0.5

    handle = register_optimizer_step_pre_hook(update)
    try:
        times, ratios, faults = elastic_overhead.measure(supernet, supernet.set_active, runs, (x, y), 3, clock)
    finally:
        handle.remove()
    assert ratios == {"max": [1.5] * 3, "min": [3.0] * 3}  # whole steps; the two warm-up rounds are left out
    summary = summarize(times, ratios, faults)
    for name in archs:
        for kind, forward in zip(("supernet", "static"), cost[name]):
            assert times[f"{kind}_{name}"] == [StepTimes(forward, 0.0, 0.5)] * 3  # each part where it ran
            assert summary[f"{kind}_{name}_ms"] == (forward + 0.5) * 1000
            assert summary["forward_ms"][f"{kind}_{name}"] == forward * 1000
            assert summary["update_ms"][f"{kind}_{name}"] == 500.0 and summary["backward_ms"][f"{kind}_{name}"] == 0
        assert all(isinstance(n, int) and n >= 0 for kind in ("supernet", "static") for n in faults[f"{kind}_{name}"])
        assert not torch.equal(runs[name][1].conv_stem.weight, before[name])
    assert not torch.equal(supernet.conv_stem.weight, stem)
    assert supernet.active_arch == archs["min"]


def test_same_se_twin_is_the_same_function_through_the_supernets_se_code():
    torch.manual_seed(0)
    space = tiny_space()
    static = OFAMobileNetV3(space).extract(space.min_arch(12)).eval()
    timm_se = [type(m) for m in static.modules() if type(m).__name__ == "SqueezeExcite"]
    x = torch.randn(2, 3, 12, 12)
    expected = static(x)
    same = elastic_overhead.with_supernet_se(static)
    assert len(timm_se) > 0
    assert not any(type(m).__name__ == "SqueezeExcite" for m in same.modules())
    assert sum(isinstance(m, ElasticSqueezeExcite) for m in same.modules()) == len(timm_se)
    torch.testing.assert_close(same(x), expected, rtol=0, atol=1e-6)


def test_same_ops_twin_takes_the_supernets_depthwise_conv_too_and_the_same_gradients():
    """``--same-ops``: every depthwise conv of the twin runs `depthwise_conv2d` (its backward as forward
    convolutions from kernel 5), and the twin's output and gradients stay those of timm's model."""
    torch.manual_seed(0)
    space = tiny_space()
    x = torch.randn(2, 3, 16, 16)

    def step(model: torch.nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        torch.manual_seed(1)  # the same dropout
        out = model(x)
        out.square().sum().backward()
        return out.detach(), {n: p.grad for n, p in model.named_parameters()}

    static = OFAMobileNetV3(space).extract(space.max_arch(16)).train()
    depthwise = sum(type(m).__name__ == "Conv2d" and m.groups > 1 for m in static.modules())
    same = elastic_overhead.with_supernet_ops(copy.deepcopy(static))
    assert depthwise > 0 and sum(isinstance(m, elastic_overhead.SupernetDepthwise) for m in same.modules()) == depthwise
    (out, grads), (same_out, same_grads) = step(static), step(same)
    torch.testing.assert_close(same_out, out, rtol=0, atol=1e-5)
    assert same_grads.keys() == grads.keys()
    for name, grad in same_grads.items():
        torch.testing.assert_close(grad, grads[name], rtol=1e-4, atol=1e-5)


def test_breakdown_models_compute_the_same_function_each_with_one_more_part_of_the_supernet():
    torch.manual_seed(0)
    space = tiny_space()
    models = elastic_breakdown.breakdown_models(space, 12)
    assert list(models) == ["static", "same_se", "exact", "no_transforms", "supernet"]
    exact, no_transforms, supernet = models["exact"], models["no_transforms"], models["supernet"]
    assert exact.space.kernels == (3,) and exact.space.expands == (2,) and exact.space.depths == (1,)
    assert exact.active_arch == exact.space.max_arch(12)  # nothing to slice: the space's only subnet
    assert no_transforms.space.kernels == (3,) and no_transforms.space.expands == space.expands
    assert not any(".transforms." in key for key in no_transforms.state_dict())
    assert any(".transforms." in key for key in supernet.state_dict())
    for model in models.values():
        model.eval()
    x = torch.randn(2, 3, 12, 12)
    expected = supernet(x)
    for name, model in models.items():
        torch.testing.assert_close(model(x), expected, rtol=0, atol=1e-5, msg=name)


def test_measure_models_shuffles_the_order_each_round_and_divides_by_the_first_model(monkeypatch):
    order = []

    def fake_step(model, optimizer, batch, clock):
        order.append(model)
        return StepTimes({"a": 2.0, "b": 3.0, "c": 5.0}[model], 0.0, 0.0), 0

    monkeypatch.setattr(sys.modules[elastic_breakdown.measure_models.__module__], "timed_step", fake_step)
    models = {name: (name, None) for name in ("a", "b", "c")}
    times, ratios, faults = elastic_breakdown.measure_models(models, (None, None), 10, time.perf_counter)
    rounds = [tuple(order[i : i + 3]) for i in range(0, len(order), 3)]
    assert len(rounds) == 12 and all(sorted(r) == ["a", "b", "c"] for r in rounds)
    before = {m: {order[i - 1] for i in range(1, len(order)) if order[i] == m} for m in "abc"}
    assert all(before[m] - {m} == set("abc") - {m} for m in "abc")  # no model always follows the same one
    assert ratios == {"b": [1.5] * 10, "c": [2.5] * 10}
    assert times["a"] == [StepTimes(2.0, 0.0, 0.0)] * 10 and faults["c"] == [0] * 10
    order.clear()
    elastic_breakdown.measure_models(models, (None, None), 10, time.perf_counter)
    assert [tuple(order[i : i + 3]) for i in range(0, len(order), 3)] == rounds  # seeded: the same orders


def test_breakdown_parts_are_the_differences_of_successive_ratios():
    ratios = {"same_se": 0.98, "exact": 0.99, "no_transforms": 1.01, "supernet": 1.04}
    result = {f"overhead_{name}": ratio for name, ratio in ratios.items()}
    parts = elastic_breakdown.add_parts(result)
    assert parts["part_se_code"] == -0.02
    assert parts["part_block_code"] == 0.01
    assert parts["part_elastic_widths_depths"] == 0.02
    assert parts["part_kernel_transforms"] == 0.03


@pytest.mark.parametrize("flags", [["--invocations", "0"], ["--rounds", "1"], ["--nope"]])
def test_breakdown_bad_flags_exit_with_a_usage_error(flags, capsys):
    with pytest.raises(SystemExit) as exc:
        elastic_breakdown.main(flags)
    assert exc.value.code == 2
    assert "elastic_breakdown.py: error:" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--invocations", "0"], ["--cpu-time"], ["--rounds", "1"]])
def test_bad_flags_exit_with_a_usage_error(flags, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["elastic_overhead.py", *flags])
    with pytest.raises(SystemExit) as exc:
        elastic_overhead.main()
    assert exc.value.code == 2
    assert "elastic_overhead.py: error:" in capsys.readouterr().err


FAKE_OFFICIAL = """
import copy
import json
import time
from pathlib import Path

from torch import nn

NOW = [0.0]
time.perf_counter = lambda: NOW[0]  # the worker's clock moves only when one of the models below runs forward


class Static(nn.Module):  # a static network whose step takes 2 s on that clock
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        NOW[0] += 2.0
        return self.net(x)


class Supernet(nn.Module):  # stands in for an official supernet: records its keywords and subnets; 3 s a step
    def __init__(self, **kwargs):
        super().__init__()
        with Path(__file__).with_name("built.jsonl").open("a") as f:
            f.write(json.dumps({"network": type(self).__name__, **kwargs}) + "\\n")
        n_classes = kwargs["n_classes"]
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, n_classes))

    def set_active_subnet(self, **config):
        with Path(__file__).with_name("seen.jsonl").open("a") as f:
            f.write(json.dumps(config) + "\\n")

    def get_active_subnet(self, preserve_weight):
        return Static(copy.deepcopy(self.net))

    def forward(self, x):
        NOW[0] += 3.0
        return self.net(x)


class OFAMobileNetV3(Supernet):
    pass


class OFAResNets(Supernet):
    pass
"""


@pytest.mark.parametrize(("space", "invocations"), [("mbv3", 2), ("ofa_resnet50", 1)])
def test_official_overhead_runs_the_official_package_on_our_three_subnets(
    space, invocations, tmp_path, monkeypatch, capsys
):
    # The spec's middle subnet sorts 1000 seeded samples by MACs: computed once, for the run and for the checks.
    spec = functools.cache(official_overhead.official_spec)
    monkeypatch.setattr(official_overhead, "official_spec", spec)
    networks = tmp_path / "ofa" / "imagenet_classification" / "elastic_nn" / "networks"
    networks.mkdir(parents=True)
    for folder in [networks, *networks.parents][:4]:
        (folder / "__init__.py").touch()
    (networks / "__init__.py").write_text(textwrap.dedent(FAKE_OFFICIAL))
    argv = ["--official", str(tmp_path), "--invocations", str(invocations), "--rounds", "2", "--resolution", "8"]
    assert official_overhead.main([*argv, "--space", space, "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for name in ("max", "mid", "min"):
        assert result[f"overhead_{name}_runs"] == [1.5] * invocations and result[f"overhead_{name}"] == 1.5  # 3 s / 2 s
    built = [json.loads(line) for line in (networks / "built.jsonl").read_text().splitlines()]
    seen = [json.loads(line) for line in (networks / "seen.jsonl").read_text().splitlines()]
    expected = spec(space, 8)["subnets"]
    if space == "mbv3":
        lists = {"ks_list": [3, 5, 7], "expand_ratio_list": [3, 4, 6], "depth_list": [2, 3, 4], "width_mult": 1.0}
        assert built[0] == {"network": "OFAMobileNetV3", "n_classes": 1000, "dropout_rate": 0.1} | lists
        assert expected["min"] == {"ks": [3] * 20, "e": [3] * 20, "d": [2] * 5}
        assert expected["max"] == {"ks": [7] * 20, "e": [6] * 20, "d": [4] * 5}
    else:  # the published OFA-ResNet50 (model_zoo's ofa_resnet50)
        lists = {"depth_list": [0, 1, 2], "expand_ratio_list": [0.2, 0.25, 0.35], "width_mult_list": [0.65, 0.8, 1.0]}
        assert built[0] == {"network": "OFAResNets", "n_classes": 1000, "dropout_rate": 0.0} | lists
        assert expected["min"] == {"d": [0] * 5, "e": [0.2] * 18, "w": [0] * 6}
        assert expected["max"] == {"d": [2] * 5, "e": [0.35] * 18, "w": [2] * 6}
    assert result["space"] == space and result["official_network"] == built[0]["network"] and len(built) == invocations
    assert {json.dumps(c) for c in seen} == {json.dumps(c) for c in expected.values()}


def test_official_overhead_names_an_unknown_space_in_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        official_overhead.main(["--official", str(tmp_path), "--space", "nope"])
    assert exc.value.code == 2 and "nope: space not found" in capsys.readouterr().err


# Each of our overhead rows and the official code's row it stands beside (bench/run_all.py).
BESIDE_OFFICIAL = {
    "elastic_overhead": "official_overhead",
    "elastic_overhead_proxyless": "official_overhead_proxyless",
    "elastic_overhead_resnet": "official_overhead_resnet",
    "elastic_overhead_resnet_used": "official_overhead_resnet",
}


def timing_flags(command: list[str]) -> dict[str, str]:
    """The flags of a row's command that decide how it is timed, with their values."""
    flags = ("--invocations", "--rounds", "--batch", "--resolution", "--space")
    return {flag: command[command.index(flag) + 1] for flag in flags if flag in command}


@pytest.mark.parametrize(("ours", "official"), BESIDE_OFFICIAL.items())
def test_each_overhead_row_is_timed_as_the_official_row_beside_it(ours, official):
    """Processes, rounds, batch, resolution and space: a row whose ratio is read beside the official code's
    must be measured the same way (a median of more processes is a steadier figure, not the same one)."""
    rows = run_all.BENCHMARKS
    assert timing_flags(rows[ours].command) == timing_flags(rows[official].command)
    assert "--invocations" in timing_flags(rows[ours].command)
