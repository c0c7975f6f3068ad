"""Evolutionary search: constraints hold, seeds reproduce, impossible budgets say the minimum, Pareto is exact."""

import json

import numpy as np
import pytest
import torch
from helpers import scalar_series, tiny_space

from ofa.cli import main
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.encoding import GeneLayout
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.utils.errors import OFAError
from search.dense import DenseCost, macs_model
from search.evolution import _redraw, _Scores, cheapest_rows, check_reachable, run_search, unique_rows
from search.latency import LatencyTable, save_table
from search.pareto import ParetoFront, non_dominated
from search.predictor.model import AccuracyPredictor
from search.search_config import EvolutionConfig, SearchConfig

SMALL = EvolutionConfig(population=40, generations=40)


def layer_ms(layer) -> float:
    """Synthetic device: cost grows with MACs, kernel size and SE (not proportional to MACs alone)."""
    return 1e-5 * layer.macs + 0.002 * layer.kernel + (0.01 if layer.se else 0.0) + 0.005


class LinearAccuracy:
    """A known accuracy function of the arch: larger kernels/expands/depths/resolution help, unevenly."""

    def __init__(self, space: SearchSpace, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.space = space
        self.wk = rng.uniform(0.2, 1.0, (space.num_slots, len(space.kernels))).cumsum(1)
        self.we = rng.uniform(0.2, 1.0, (space.num_slots, len(space.expands))).cumsum(1)
        self.calls = 0

    def predict_batch(self, rows):
        self.calls += 1
        layout = GeneLayout.of(self.space)
        sl, act = layout.slices, layout.active_slots(rows)
        slots = np.arange(self.space.num_slots)
        k = self.wk[slots, rows[:, sl["kernels"]]]
        e = self.we[slots, rows[:, sl["expands"]]]
        return 50.0 + 2.0 * rows[:, layout.resolution] + (act * (k + e)).sum(1)


@pytest.fixture(scope="module")
def setup():
    space = tiny_space()
    lat = DenseCost.from_layer_cost(space, layer_ms, overhead=0.3)
    rows = GeneLayout.of(space).sample(5000, np.random.default_rng(0))
    return space, lat, np.percentile(lat.predict_batch(rows), [20, 50])


def test_defaults_are_the_official_evolution_finder():
    c = EvolutionConfig()
    assert (c.population, c.generations, c.parent_ratio, c.mutation_ratio, c.mutate_prob, c.resolution_prob) == (
        100,
        500,
        0.25,
        0.5,
        0.1,
        0.5,
    )
    assert (c.n_parents, c.n_mutations) == (25, 50)
    with pytest.raises(OFAError, match="parent"):
        EvolutionConfig(population=3, parent_ratio=0.1)


def test_constraints_hold_and_results_are_consistent(setup):
    space, lat, (t20, t50) = setup
    macs = macs_model(space)
    max_macs = float(np.percentile(macs.predict_batch(GeneLayout.of(space).sample(2000, np.random.default_rng(1))), 60))
    pred = LinearAccuracy(space)
    res = run_search(space, pred, lat, SearchConfig([t20, t50], max_macs=max_macs, seed=3, evolution=SMALL))
    assert pred.calls <= 2 * (SMALL.generations + 1)  # at most one batched predictor call per generation
    assert [t.target_ms for t in res.targets] == [t20, t50]
    for t in res.targets:
        arch = space.validate(t.arch)
        assert t.arch.extra["latency_ms"] <= t.target_ms + 1e-9
        assert lat.predict(arch) == pytest.approx(t.arch.extra["latency_ms"], abs=1e-4)
        assert t.arch.extra["macs"] == space.macs(arch) <= max_macs
        assert t.arch.extra["params"] == space.params(arch)
        row = GeneLayout.of(space).encode(arch)[None]
        assert t.arch.extra["predicted_top1"] == pytest.approx(pred.predict_batch(row)[0])
        assert np.all(np.diff(t.history) >= 0)  # elitist: the best never gets worse
    assert res.targets[1].arch.extra["predicted_top1"] >= res.targets[0].arch.extra["predicted_top1"]
    # every evaluated subnet met the constraints of its search
    assert np.all(res.front.latency_ms <= t50 + 1e-9) and np.all(res.front.macs <= max_macs)
    assert len(unique_rows(res.front.rows)) == len(res.front)


def test_seeded_and_reproducible(setup):
    space, lat, (t20, _) = setup
    pred = LinearAccuracy(space)
    a = run_search(space, pred, lat, SearchConfig([t20], seed=7, evolution=SMALL))
    b = run_search(space, pred, lat, SearchConfig([t20], seed=7, evolution=SMALL))
    c = run_search(space, pred, lat, SearchConfig([t20], seed=8, evolution=SMALL))
    assert a.targets[0].arch.to_dict() == b.targets[0].arch.to_dict()
    assert np.array_equal(a.front.rows, b.front.rows) and np.array_equal(a.targets[0].history, b.targets[0].history)
    assert not np.array_equal(a.front.rows, c.front.rows)
    # another budget's search only adds candidates: this budget's answer can only improve
    d = run_search(space, pred, lat, SearchConfig([t20 * 1.5, t20], seed=7, evolution=SMALL))
    assert d.targets[1].arch.extra["predicted_top1"] >= a.targets[0].arch.extra["predicted_top1"]
    assert d.targets[1].arch.extra["latency_ms"] <= t20


def test_search_beats_random_sampling(setup):
    space, lat, (t20, _) = setup
    pred = LinearAccuracy(space, seed=1)
    res = run_search(space, pred, lat, SearchConfig([t20], seed=0, evolution=EvolutionConfig(generations=150)))
    rows = GeneLayout.of(space).sample(20000, np.random.default_rng(5))
    ok = lat.predict_batch(rows) <= t20
    assert ok.sum() > 2000
    assert res.targets[0].arch.extra["predicted_top1"] > pred.predict_batch(rows[ok][:10000]).max()


def test_cheapest_rows_are_exact_minima(setup):
    space, lat, _ = setup
    rows = cheapest_rows(space, lat)
    assert rows.shape == (len(space.resolutions), GeneLayout.of(space).genes)
    best = lat.predict_batch(rows)
    # monotone synthetic costs: the smallest arch at each resolution is the cheapest
    mins = lat.predict_batch(GeneLayout.of(space).encode_many([space.min_arch(r) for r in space.resolutions]))
    assert np.allclose(best, mins)
    # a cost that prefers big kernels: the exact minimum is not the min arch, and random search never beats it
    inverted = DenseCost(space, lat.fixed, [t[:, ::-1, :].copy() for t in lat.tables])  # per slot: r, kernel, expand
    cheap = inverted.predict_batch(cheapest_rows(space, inverted)).min()
    layout = GeneLayout.of(space)
    assert cheap < inverted.predict_batch(layout.encode_many([space.min_arch(r) for r in space.resolutions])).min()
    assert inverted.predict_batch(layout.sample(20000, np.random.default_rng(0))).min() >= cheap - 1e-12


def test_impossible_constraint_names_the_minimum(setup):
    space, lat, (t20, _) = setup
    smallest = lat.predict(space.min_arch(min(space.resolutions)))
    with pytest.raises(OFAError, match=f"smallest achievable {smallest:.4g} ms"):
        run_search(space, LinearAccuracy(space), lat, SearchConfig([t20, smallest * 0.99], evolution=SMALL))
    min_macs = space.macs(space.min_arch(min(space.resolutions)))
    with pytest.raises(OFAError, match=rf"--max-macs .* smallest achievable {min_macs / 1e6:.4g}M"):
        run_search(space, LinearAccuracy(space), lat, SearchConfig([t20], max_macs=min_macs - 1, evolution=SMALL))
    # exactly the minimum is reachable, and the search returns that subnet
    res = run_search(space, LinearAccuracy(space), lat, SearchConfig([smallest], evolution=EvolutionConfig(40, 5)))
    assert res.targets[0].arch.extra["latency_ms"] == pytest.approx(smallest)
    check_reachable(space, [])


def test_jointly_impossible_constraints(setup):
    space, lat, _ = setup
    # latency that rewards large layers, MACs that reward small ones: each budget alone is reachable
    top = max(t.max() for t in lat.tables)
    inverted = DenseCost(space, lat.fixed, [top - t for t in lat.tables])
    fastest = inverted.predict_batch(cheapest_rows(space, inverted)).min()
    min_macs = space.macs(space.min_arch(min(space.resolutions)))
    with pytest.raises(OFAError, match=r"no subnet meets latency target .* and --max-macs"):
        run_search(
            space,
            LinearAccuracy(space),
            inverted,
            SearchConfig([fastest * 1.001], max_macs=min_macs * 1.001, evolution=SMALL),
        )


def test_non_dominated_matches_brute_force():
    rng = np.random.default_rng(0)
    pts = np.round(rng.dirichlet((1, 1, 1), 700) * 20 + rng.uniform(0, 3, (700, 3)))  # trade-offs, many ties
    pts = np.concatenate([pts, pts[:60]])  # and exact duplicates, spread over several sweep blocks
    got = set(non_dominated(pts).tolist())
    le = (pts[None, :, :] <= pts[:, None, :]).all(-1)
    lt = (pts[None, :, :] < pts[:, None, :]).any(-1)
    want = set(np.flatnonzero(~(le & lt).any(1)).tolist())
    assert got == want and len(want) > 20


def test_front_answers_other_budgets(setup, tmp_path):
    space, lat, (t20, t50) = setup
    res = run_search(space, LinearAccuracy(space), lat, SearchConfig([t20, t50], seed=1, evolution=SMALL))
    front = res.front
    assert isinstance(front, ParetoFront) and len(front) > 3
    assert np.all(np.diff(front.latency_ms) >= 0)
    for budget in (t20, (t20 + t50) / 2, t50):
        arch = front.best_under(budget)
        assert arch.extra["latency_ms"] <= budget
        feasible = front.top1[front.latency_ms <= budget]
        assert arch.extra["predicted_top1"] == pytest.approx(feasible.max(), abs=1e-4)
    assert front.best_under(0.0) is None
    # each budget's answer is the best subnet evaluated within it, which the front also gives
    for t in res.targets:
        assert front.best_under(t.target_ms).extra["predicted_top1"] == pytest.approx(t.arch.extra["predicted_top1"])
    paths = res.save(tmp_path, lut="tables/x.yaml")
    doc = json.loads(paths["pareto_json"].read_text())
    assert doc["count"] == len(front) and doc["space"] == space.fingerprint()
    arch = Arch.load(tmp_path / f"arch_{t20:g}ms.json")
    assert set(arch.extra) >= {"predicted_top1", "latency_ms", "macs", "params", "lut"}
    assert arch.extra["lut"] == "tables/x.yaml"
    assert paths["pareto_png"].read_bytes()[:4] == b"\x89PNG"
    lines = paths["metrics"].read_text().splitlines()
    assert len(lines) == 2 * (SMALL.generations + 1) and json.loads(lines[-1])["target_ms"] == pytest.approx(t50)


def test_canonical_rows_identify_subnets(space):
    layout = GeneLayout.of(space)
    rows = layout.sample(300, np.random.default_rng(0))
    canon = layout.canonical(rows)
    assert [space.layers(layout.decode(r)) for r in canon] == [space.layers(layout.decode(r)) for r in rows]
    assert np.array_equal(layout.canonical(canon), canon)
    assert len(unique_rows(np.concatenate([canon, canon]))) == len(unique_rows(canon))


def _table(space: SearchSpace, path, resolutions=None):
    entries = {}
    for r in resolutions or space.resolutions:
        layers = space.fixed_layers(r) + [
            space.block_spec(r, s, j, k, e)
            for s in range(space.num_stages)
            for j in range(space.max_depth)
            for k in space.kernels
            for e in space.expands
        ]
        for layer in layers:
            entries[layer.key] = {"mean_ms": layer_ms(layer), "std_ms": 0.0, "count": 1}
    if resolutions:
        space = SearchSpace.from_dict({**space.to_dict(), "resolutions": list(resolutions)})
    meta = {
        "device": "synthetic",
        "backend": "ort-cpu",
        "threads": 1,
        "batch": 1,
        "overhead_ms": 0.3,
        "space": space.to_dict(),
        "space_fingerprint": space.fingerprint(),
        "protocol": {},
    }
    return save_table(path, meta, entries)


def test_cli_search(tmp_path, capsys):
    space = tiny_space()
    torch.manual_seed(0)
    OFAMobileNetV3(space).save(tmp_path / "supernet.pt")
    AccuracyPredictor(space, hidden=32, layers=2, target_mean=80, target_std=4).save(tmp_path / "predictor.pt")
    lut = _table(space, tmp_path / "lut.yaml")
    table = LatencyTable.load(lut)
    budget = float(np.percentile(table.predict_batch(GeneLayout.of(space).sample(2000, np.random.default_rng(0))), 40))
    args = [
        "search",
        "--supernet",
        str(tmp_path / "supernet.pt"),
        "--predictor",
        str(tmp_path / "predictor.pt"),
        "--lut",
        str(lut),
        "--latency-ms",
        f"{budget:.4f}",
        f"{budget * 1.3:.4f}",
        "--max-macs",
        "0.5G",
        "--generations",
        "30",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Pareto front" in out and "predicted top-1" in out
    for t in (budget, budget * 1.3):
        arch = Arch.load(tmp_path / "out" / f"arch_{float(f'{t:.4f}'):g}ms.json")
        assert arch.extra["latency_ms"] <= t and arch.extra["lut"] == str(lut)
        assert table.predict(space.validate(arch)) == pytest.approx(arch.extra["latency_ms"], abs=1e-4)
        assert arch.space == space.fingerprint()  # the arch file names the supernet's space
    assert (tmp_path / "out" / "pareto.png").is_file() and (tmp_path / "out" / "search.json").is_file()
    board = scalar_series(tmp_path / "out" / "tensorboard")  # the per-generation curves, in TensorBoard too
    assert sorted(board) == sorted(f"search/best_top1/{float(f'{t:.4f}'):g}ms" for t in (budget, budget * 1.3))
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    for t in (budget, budget * 1.3):
        t = float(f"{t:.4f}")
        expected = [r["best_top1"] for r in rows if r["target_ms"] == t]
        assert len(expected) == 31 and board[f"search/best_top1/{t:g}ms"] == pytest.approx(expected, rel=1e-6)

    # impossible budget: one line with the smallest achievable latency, exit 2
    assert main([*args[:7], "--latency-ms", "0.001", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ofa search: error: latency target 0.001 ms is below the smallest achievable")
    assert "\n" not in err and not (tmp_path / "bad").exists()

    # a predictor fitted on another space is refused
    other = tiny_space(resolutions=(12, 16))
    AccuracyPredictor(other, hidden=8, layers=1).save(tmp_path / "other.pt")
    assert main([*args[:4], str(tmp_path / "other.pt"), *args[5:]]) == 2
    assert "predictor was fitted on space" in capsys.readouterr().err

    # a table measured at some of the supernet's resolutions: the search keeps to those
    part = _table(space, tmp_path / "part.yaml", resolutions=(12, 20))
    assert main([*args[:5], "--lut", str(part), *args[7:14], "--out", str(tmp_path / "part")]) == 0
    assert "measured resolutions [12, 20] of the supernet's [12, 16, 20]" in capsys.readouterr().err
    assert Arch.load(tmp_path / "part" / f"arch_{float(f'{budget:.4f}'):g}ms.json").space == space.fingerprint()
    doc = json.loads((tmp_path / "part" / "pareto.json").read_text())
    assert {p["resolution"] for p in doc["points"]} <= {12, 20} and len(doc["points"]) > 3
    predictor = AccuracyPredictor.load(tmp_path / "predictor.pt")
    for p in doc["points"][:10]:
        assert predictor.predict(space.validate(Arch.from_dict(p))) == pytest.approx(p["predicted_top1"], abs=1e-4)

    # bad flag values are one-line argparse errors
    with pytest.raises(SystemExit) as exc:
        main([*args, "--max-params", "lots"])
    assert exc.value.code == 2
    assert "is not a count" in capsys.readouterr().err


def test_scores_predict_each_distinct_subnet_once(space):
    """Rows that differ only in unused genes, or repeat, are one subnet: predicted once, in the order first seen."""
    layout = GeneLayout.of(space)
    pred = LinearAccuracy(space)
    batched = []
    counting = type(
        "Counting", (), {"predict_batch": lambda self, rows: batched.append(rows) or pred.predict_batch(rows)}
    )
    scores = _Scores(space, counting())
    rng = np.random.default_rng(0)
    first = layout.sample(60, rng)
    noisy = layout.sample(60, rng)  # the same subnets with other values in the genes they do not use
    unused = ~layout.active(first)
    again = np.where(unused, noisy, first)
    batches = [first, np.concatenate([again[::-1], layout.sample(30, rng), first[:5]])]
    canon = [layout.canonical(b) for b in batches]
    for b, c in zip(batches, canon):
        assert np.array_equal(scores(b), pred.predict_batch(c))
    rows, top1 = scores.seen()
    want = {}
    for r in np.concatenate(batched):
        want.setdefault(r.tobytes(), r)
    assert len(rows) == sum(map(len, batched)) == len(want)  # nothing predicted twice
    assert np.array_equal(rows, np.stack(list(want.values()))) and np.array_equal(rows, layout.canonical(rows))
    assert np.array_equal(rows[: len(unique_rows(canon[0]))], canon[0][np.sort(unique_rows(canon[0]))])
    assert np.array_equal(top1, pred.predict_batch(rows))


def test_redraw_keeps_the_first_feasible_draw_and_falls_back():
    """Candidates are drawn per child in order; the first feasible one wins, a child with none keeps its fallback."""
    draws = []

    def make(slots, n):
        base = len(draws)
        draws.append((slots.copy(), n))
        return (base * 100 + np.arange(n)[:, None] * 10 + slots[None, :])[..., None]  # round, draw, child

    ok = lambda rows: (rows[:, 0] % 10 != 3) & ((rows[:, 0] // 10) % 10 >= 2)  # child 3 never; draw 2 first  # noqa: E731
    out = _redraw(make, 5, ok, np.full((5, 1), -1), max_redraws=30)
    assert out[:, 0].tolist() == [20, 21, 22, -1, 24]
    assert [n for _, n in draws] == [4, 16, 10] and all(s.tolist() == [3] for s, _ in draws[1:])
