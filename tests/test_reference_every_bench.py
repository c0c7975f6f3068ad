"""bench.reference_every: each round builds the demo's table once per N, in alternating order, with the recipe's
table settings, and judges every table against one plain-loop timing of the same subnets."""

from types import SimpleNamespace

from helpers import TINY_RECIPE

from bench import reference_every as bench
from bench.standalone_latency import Loop
from ofa.utils.io import read_yaml, write_yaml


def test_rounds_build_each_n_alternately_and_judge_them_on_one_plain_loop(tmp_path, monkeypatch):
    built, timed = [], []

    def build(space, out, protocol):  # a table whose predictions are N x the first subnet's plain-loop figure
        built.append((protocol.reference_every, protocol.blocks, protocol.budget_s, protocol.block_ms))
        noise = {"per_resolution": {r: {"noise_pct": float(protocol.reference_every)} for r in space.resolutions}}
        predict = lambda arch: protocol.reference_every * timed[-1][0][1]  # noqa: E731
        return 1.0, SimpleNamespace(predict=predict, meta={"noise": noise})

    def plain_rows(space, n, seed, loop):
        timed.append([(arch, 1.0, 1.0) for arch in (space.min_arch(r) for r in space.resolutions)])
        return timed[-1]

    monkeypatch.setattr(bench, "build", build)
    monkeypatch.setattr(bench, "plain_rows", plain_rows)
    raw = read_yaml(TINY_RECIPE)
    raw["pipeline"] = {"lut_blocks": 3, "lut_budget_s": 0.25, "lut_block_ms": 4.0}  # the table settings it reads
    recipe = write_yaml(tmp_path / "recipe.yaml", raw)
    result = bench.run(str(recipe), [1, 2], 2, 1, Loop(), tmp_path)
    assert [b[0] for b in built] == [1, 2, 2, 1] and {b[1:] for b in built} == {(3, 0.25, 4.0)}
    assert len(timed) == 2  # one plain loop per round, after its tables
    one, two = (result["by_reference_every"][k] for k in ("1", "2"))
    assert [r["within_10pct"] for r in one["rounds"]] == [100.0, 100.0] and one["within_10pct_median"] == 100.0
    assert [r["mape"] for r in two["rounds"]] == [100.0, 100.0] and two["within_10pct_median"] == 0.0
    assert [r["noise_pct"] for r in two["rounds"]] == [2.0, 2.0] and two["build_seconds_median"] == 1.0
    assert result["retest_within_10pct"] == [100.0, 100.0] and result["subnets"] == len(raw["space"]["resolutions"])
