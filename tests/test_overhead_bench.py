"""bench/elastic_overhead.py times each subnet's supernet step next to its static twin's."""

import time

import pytest
import torch
from conftest import load_bench_script, tiny_space

from ofa.supernet import OFAMobileNetV3

overhead = load_bench_script("elastic_overhead")


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
    times, ratios, faults = overhead.measure(supernet, runs, (x, y), rounds=3, clock=time.perf_counter)
    for name in archs:
        sup, static = times[f"supernet_{name}"], times[f"static_{name}"]
        assert len(sup) == len(static) == len(ratios[name]) == 3  # the two warm-up rounds are left out
        assert ratios[name] == [a / b for a, b in zip(sup, static)]
        assert all(isinstance(n, int) and n >= 0 for kind in ("supernet", "static") for n in faults[f"{kind}_{name}"])
        assert not torch.equal(runs[name][1].conv_stem.weight, before[name])
    assert not torch.equal(supernet.conv_stem.weight, stem)
    assert supernet.active_arch == archs["min"]


@pytest.mark.parametrize("flags", [["--invocations", "0"], ["--cpu-time"]])
def test_bad_flags_exit_with_a_usage_error(flags, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["elastic_overhead.py", *flags])
    with pytest.raises(SystemExit) as exc:
        overhead.main()
    assert exc.value.code == 2
    assert "elastic_overhead.py: error:" in capsys.readouterr().err
