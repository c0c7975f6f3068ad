"""Latency tables: key enumeration, prediction, file format, mismatch errors, protocols, noise, build, check."""

from __future__ import annotations

import ast
import json
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
import torch
import yaml
from helpers import FAST, NO_SPANS

from bench import standalone_latency
from ofa.cli import main
from ofa.families.counts import count_params
from ofa.families.mbv3.encoding import GeneLayout, sample_arch
from ofa.families.mbv3.space import SearchSpace, StageSpec
from ofa.lut import build as lut_build
from ofa.lut import check as lut_check
from ofa.lut import timing
from ofa.lut.build import TableBuildConfig, build_table, calibration_archs, fit_correction
from ofa.lut.check import CheckConfig, check_table
from ofa.lut.interleaved import Interleaved, summarize
from ofa.lut.layer_models import LayerModules, input_shape, layer_specs
from ofa.lut.measure import TimingConfig, measure_latencies, measure_onnx
from ofa.lut.protocols import protocol_from_dict, time_models, with_overrides
from ofa.lut.stats import block_figure, noise_pct, quantile_stats, quiet_rounds, repeat_stats, trimmed_stats
from ofa.lut.timing import Standalone
from ofa.runtime.convert import export_onnx
from ofa.runtime.runtimes import Runner
from ofa.utils.errors import OFAError
from search.latency import LatencyTable, space_from_arg


def build(out, **settings) -> TableBuildConfig:
    """A quick build: the fast protocol, 3 calibration subnets, no progress bars, any noise accepted."""
    return TableBuildConfig(
        out, **{"protocol": FAST, "calibrate": 3, "progress": False, "max_noise_pct": 1e6, **settings}
    )


def small_space(**overrides) -> SearchSpace:
    """Two stages (one with SE and hswish), two choices each: a build takes a few seconds."""
    base = dict(
        stages=(StageSpec(8, 2, False, "relu"), StageSpec(16, 1, True, "hswish")),
        kernels=(3, 5),
        expands=(2, 3),
        depths=(1, 2),
        resolutions=(8, 12),
        stem_width=8,
        stem_stride=1,
        first_width=8,
        final_expand_width=24,
        feature_width=32,
        in_channels=1,
        num_classes=4,
        dropout=0.0,
    )
    base.update(overrides)
    return SearchSpace(**base)


def synthetic_table(space: SearchSpace, scale: float = 0.9, offset: float = 0.05) -> LatencyTable:
    """Entries from a known per-layer cost, so every prediction can be checked by hand."""
    entries = {
        spec.key: {"mean_ms": 1e-6 * spec.macs + 0.01, "std_ms": 0.001, "count": 10}
        for r in space.resolutions
        for spec in layer_specs(space, r)
    }
    meta = {
        "device": "test",
        "backend": "ort-cpu",
        "threads": 1,
        "batch": 1,
        "overhead_ms": 0.02,
        "protocol": FAST.to_dict(),
        "space": space.to_dict(),
        "space_fingerprint": space.fingerprint(),
        "correction": {
            "kind": "affine-per-resolution",
            "per_resolution": {r: {"scale": scale, "offset": offset, "points": []} for r in space.resolutions},
        },
    }
    return LatencyTable(meta, entries)


# ------------------------------------------------------------------------------------------ keys and modules
def test_layer_specs_cover_every_layer_of_random_archs(space, rng):
    keys = {spec.key for r in space.resolutions for spec in layer_specs(space, r)}
    for _ in range(300):
        arch = sample_arch(space, rng)
        missing = [layer.key for layer in space.layers(arch) if layer.key not in keys]
        assert not missing
    # per resolution: 4 fixed layers + per stage (first block, later blocks) x kernels x expands
    per_res = 4 + space.num_stages * 2 * len(space.kernels) * len(space.expands)
    assert len(keys) == len(space.resolutions) * per_res


def test_layer_modules_are_the_subnet_layers(space):
    """Each module has exactly the layer's parameters and output shape: it is the layer the subnet runs."""
    modules = LayerModules(space)
    for key, (spec, module) in modules.for_resolution(16).items():
        assert count_params(module) == spec.params, key
        with torch.no_grad():
            out = module.eval()(torch.zeros(input_shape(spec, 2)))
        expected = (2, spec.out_c) if spec.kind == "head" else (2, spec.out_c, spec.out_hw, spec.out_hw)
        assert tuple(out.shape) == expected, key


# ------------------------------------------------------------------------------------------ prediction
def test_predict_is_corrected_sum_and_matches_predict_batch(space, rng):
    table = synthetic_table(space, scale=0.9, offset=0.05)
    rows = GeneLayout.of(space).sample(500, rng)
    batch = table.predict_batch(rows)
    for row, value in zip(rows[:50], batch[:50]):
        arch = GeneLayout.of(space).decode(row)
        by_hand = 0.9 * (0.02 + sum(1e-6 * layer.macs + 0.01 for layer in space.layers(arch))) + 0.05
        assert table.predict(arch) == pytest.approx(by_hand, rel=1e-12)
        assert value == pytest.approx(by_hand, rel=1e-12)
        assert table.predict_raw(arch) == pytest.approx((by_hand - 0.05) / 0.9, rel=1e-12)
    assert table.predict_batch(GeneLayout.of(space).sample(100_000, rng)).shape == (100_000,)


def test_save_load_round_trip(tmp_path, space, rng):
    table = synthetic_table(space)
    path = table.save(tmp_path / "t.yaml")
    loaded = LatencyTable.load(path)
    rows = GeneLayout.of(space).sample(100, rng)
    np.testing.assert_allclose(loaded.predict_batch(rows), table.predict_batch(rows))
    assert loaded.space == space
    entry_lines = [line for line in path.read_text().splitlines() if "mean_ms" in line]
    assert len(entry_lines) == len(table.entries)  # one line per entry
    assert space_from_arg(str(path)) == space


def test_for_space_restricts_resolutions(space):
    table = synthetic_table(replace(space, resolutions=(12, 16)))
    bound = table.for_space(space)  # the space also has 20 px, which the table never measured
    assert bound.space.resolutions == (12, 16)
    with pytest.raises(OFAError, match="none of which"):
        table.for_space(replace(space, resolutions=(24,)))


# ------------------------------------------------------------------------------------------ mismatch errors
def test_missing_entry_is_named(space):
    table = synthetic_table(space)
    key = next(k for k in table.entries if k.startswith("mbconv:"))
    entries = {k: v for k, v in table.entries.items() if k != key}
    with pytest.raises(OFAError, match=key.replace("=", ".")):
        LatencyTable(table.meta, entries)


def test_other_widths_or_resolution_name_the_missing_key(space):
    table = synthetic_table(space)
    wider = replace(space, stages=(StageSpec(24, 2, False, "relu"), *space.stages[1:]))
    with pytest.raises(OFAError, match=r"no entry for layer mbconv:in=\d+x\d+x8:out=24"):
        table.bind(wider)
    with pytest.raises(OFAError, match=r"no entry for layer stem:in=24x24x3"):
        table.bind(replace(space, resolutions=(24,)))
    with pytest.raises(OFAError, match="resolution: 24"):
        table.predict(replace(space.max_arch(), resolution=24))


def test_bad_table_files(tmp_path, space):
    table = synthetic_table(space)
    doc = {"format": "ofa-latency-table", "meta": dict(table.meta), "entries": dict(table.entries)}
    cases = {
        "fingerprint": ({**doc, "meta": {**doc["meta"], "space_fingerprint": "0" * 16}}, "edited by hand"),
        "value": (
            {**doc, "entries": {**doc["entries"], next(iter(doc["entries"])): {"mean_ms": "x"}}},
            r"entries\['stem:.*mean_ms: expected a number",
        ),
        "meta": (
            {**doc, "meta": {k: v for k, v in doc["meta"].items() if k != "overhead_ms"}},
            "meta.overhead_ms is missing",
        ),
        "unfinished": (
            {**doc, "meta": {**doc["meta"], "complete": False, "resolutions_done": [12]}},
            "unfinished table",
        ),
        "not a table": ({"entries": {}}, "not a latency table"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(content))
        with pytest.raises(OFAError, match=message):
            LatencyTable.load(path)
    with pytest.raises(OFAError, match="not found"):
        LatencyTable.load(tmp_path / "missing.yaml")


# ------------------------------------------------------------------------------------------ protocol
class ScriptedRunner(Runner):
    """A model whose per-call (wall, CPU) factors come from ``script(invocation, calls)``; calls are logged."""

    def __init__(self, name: str, ms: float, script, log: list) -> None:
        self.name, self.ms, self.script, self.log, self.invocations = name, ms, script, log, 0

    def times(self, calls):
        self.log.append((self.name, calls))
        wall, cpu = self.script(self.invocations, calls)
        self.invocations += 1
        return self.ms * wall, self.ms * cpu


def test_standalone_figure_ignores_slow_blocks_and_preempted_calls():
    """Each block: warm-up then back-to-back timed calls of one model; median call, then median block."""

    def script(invocation, calls):  # warm-up and timed invocations alternate: block = invocation // 2
        cpu = np.full(calls, 1.8 if invocation // 2 in (1, 4) else 1.0)  # 2 of 7 blocks: machine busy
        wall = cpu.copy()
        wall[::2] += 10  # every other call preempted: wall time far beyond the thread's CPU time
        return wall, cpu

    log: list = []
    runners = {name: ScriptedRunner(name, ms, script, log) for name, ms in (("a", 0.5), ("b", 2.0), ("c", 8.0))}
    protocol = Standalone(warmup=2, calls=20, blocks=7, seed=3, estimator="median")
    stats = time_models(runners, protocol)
    assert [stats[n]["mean_ms"] for n in "abc"] == pytest.approx([0.5, 2.0, 8.0])
    assert all(stats[n]["count"] == 7 for n in "abc")
    assert np.median(script(0, 20)[0]) > 3  # a plain median over the calls would be far off
    assert all(log[i][0] == log[i + 1][0] and (log[i][1], log[i + 1][1]) == (2, 20) for i in range(0, len(log), 2))
    orders = [tuple(name for name, _ in log[i : i + 6 : 2]) for i in range(0, len(log), 6)]
    assert len(orders) == 7 and all(sorted(o) == ["a", "b", "c"] for o in orders) and len(set(orders)) > 1
    thread = time_models(runners, Standalone(warmup=2, calls=20, blocks=7, clock="thread", estimator="median"))
    assert thread["a"]["mean_ms"] == pytest.approx(0.5)  # the CPU clock keeps every call


def test_noise_criterion_flags_blocks_that_disagree():
    quiet = {"p": repeat_stats([1.0, 1.01, 0.99, 1.0, 1.02, 1.0, 0.98]), "q": repeat_stats([2.0] * 7)}
    noisy = {**quiet, "r": repeat_stats([1.0, 1.3, 0.8, 1.1, 0.9, 1.25, 1.0])}
    assert noise_pct(quiet, ["p", "q"]) < 5 < noise_pct(noisy, ["p", "q", "r"])
    assert noise_pct(noisy, ["p", "q"]) == noise_pct(quiet, ["p", "q"])  # only the judged models count

    def swinging(invocation, calls):  # every block of this model 30% slower or faster than the last
        return np.full(calls, 1.3 if invocation % 2 else 1.0), np.full(calls, 1.3 if invocation % 2 else 1.0)

    def preempted(invocation, calls):  # 4 of 6 blocks with only 1 call in 5 running undisturbed
        wall = np.where((np.arange(calls) % 5 == 0) | (invocation < 2), 1.0, 5.0)
        return wall, np.ones(calls)

    def burst(invocation, calls):  # the first 3 blocks of 6 fully preempted (another process's burst)
        return np.full(calls, 5.0 if invocation < 3 else 1.0), np.ones(calls)

    protocol = Standalone(warmup=0, calls=10, blocks=6, estimator="median")
    runs = {
        "p": ScriptedRunner("p", 1.0, swinging, []),
        "q": ScriptedRunner("q", 1.0, preempted, []),
        "r": ScriptedRunner("r", 1.0, burst, []),
    }
    stats = time_models(runs, protocol)
    assert noise_pct(stats, ["p"]) > 5
    assert stats["q"]["spread_pct"] == 100.0  # most blocks preempted: measured, but too noisy to trust
    assert runs["r"].invocations == 9 and stats["r"]["count"] == 6 and stats["r"]["mean_ms"] == 1.0  # timed again
    assert stats["r"]["spread_pct"] == 0.0
    wall, cpu = np.array([1.0, 9.0, 1.2, 9.0, 1.1]), np.array([1.0, 1.0, 1.2, 1.1, 1.1])
    assert block_figure(wall, cpu, "wall") == (1.1, True)  # the two preempted calls left out
    assert block_figure(wall, cpu * 0.1, "wall", one_thread=False) == (1.2, True)  # worker threads: CPU says nothing


class BurstyHost:
    """A simulated host clock: busy spells (calls ``slow`` times slower, invisible to the thread's CPU clock,
    as when the hypervisor takes the CPU away) come and go with exponential durations, ~60% of the time."""

    def __init__(self, seed: int, busy_ms: float = 60.0, quiet_ms: float = 40.0, slow: float = 1.5) -> None:
        self.rng, self.now, self.busy = np.random.default_rng(seed), 0.0, False
        self.busy_ms, self.quiet_ms, self.slow = busy_ms, quiet_ms, slow
        self.switch = self.rng.exponential(quiet_ms)

    def call(self, ms: float) -> float:
        while self.now >= self.switch:
            self.busy = not self.busy
            self.switch += self.rng.exponential(self.busy_ms if self.busy else self.quiet_ms)
        took = ms * (self.slow if self.busy else 1.0) * (1 + 0.01 * abs(self.rng.standard_normal()))
        self.now += took
        return took


class HostRunner(Runner):
    """A model of known latency ``ms`` timed on a `BurstyHost`."""

    def __init__(self, host: BurstyHost, ms: float) -> None:
        self.host, self.ms = host, ms

    def times(self, calls):
        wall = np.array([self.host.call(self.ms) for _ in range(calls)])
        return wall, wall.copy()


def test_quantile_estimate_holds_on_a_bursty_host_where_the_median_does_not(monkeypatch):
    """Known true latencies on a host busy ~60% of the time in bursts longer than a short block."""
    monkeypatch.setattr(timing, "host_steal_ticks", lambda: 0)  # the simulated host, not this one, is busy
    true_ms = {"layer": 0.01, "block": 0.1, "subnet": 1.0, "large": 5.0}
    worst_new, worst_old = 0.0, 0.0
    for seed in range(4):
        protocol = Standalone(seed=seed, budget_s=5.0, burn_in_s=0.0, span_s=0.0)  # a simulated clock: no real span
        new = time_models({k: HostRunner(BurstyHost(seed), ms) for k, ms in true_ms.items()}, protocol)
        host = BurstyHost(seed)  # the same host for today's median: one host for all its models, as a build has
        old = time_models({k: HostRunner(host, ms) for k, ms in true_ms.items()}, Standalone(estimator="median"))
        for k, ms in true_ms.items():
            worst_new = max(worst_new, abs(new[k]["mean_ms"] / ms - 1))
            worst_old = max(worst_old, abs(old[k]["mean_ms"] / ms - 1))
            assert new[k]["count"] >= 15 and 0 < new[k]["ci_pct"] <= 2.0  # converged within its target
            assert new[k]["spread_pct"] > 5  # the host's burstiness, which the interval is not
    assert worst_new <= 0.03 < worst_old


def test_blocks_paired_with_one_reference_hold_where_the_host_slows_for_longer_than_a_block(monkeypatch):
    """`ofa lut check` loads subnets a few at a time. With a reference per block, a block timed inside one busy
    spell reads slow as a whole; one reference beside every block (`Standalone.reference`) scales them all by one
    quiet figure over the whole span."""
    monkeypatch.setattr(timing, "host_steal_ticks", lambda: 0)
    blocks = [[1.0 + 0.6 * j, 1.3 + 0.6 * j] for j in range(6)]
    protocol = Standalone(budget_s=5.0, burn_in_s=0.0, span_s=0.0, reference_span_s=0.0)
    worst = {"shared": 0.0, "per_block": 0.0}
    for seed in range(3):
        host = BurstyHost(seed, busy_ms=4000.0, quiet_ms=3000.0)
        reference = protocol.reference("reference", HostRunner(host, 5.0))
        for j, block in enumerate(blocks):
            protocol.measure_against(reference, {f"{j}/{i}": HostRunner(host, ms) for i, ms in enumerate(block)})
        stats = protocol.finish(reference)
        errors = [abs(stats[f"{j}/{i}"]["mean_ms"] / ms - 1) for j, b in enumerate(blocks) for i, ms in enumerate(b)]
        worst["shared"] = max(worst["shared"], *errors)
        host = BurstyHost(seed, busy_ms=4000.0, quiet_ms=3000.0)
        for block in blocks:  # each block a timing of its own, with its own reference
            stats = time_models(
                {"reference": HostRunner(host, 5.0)} | {str(ms): HostRunner(host, ms) for ms in block}, protocol
            )
            worst["per_block"] = max(worst["per_block"], *(abs(stats[str(ms)]["mean_ms"] / ms - 1) for ms in block))
    assert worst["shared"] <= 0.03 < 0.15 < worst["per_block"], worst


def test_paired_estimate_holds_where_bursts_outlast_a_models_blocks(monkeypatch):
    """Busy spells (1.5x) of ~3 s and quiet ones of ~1.5 s, as on a shared Xeon VM here: longer than one model's
    blocks, so a model's own low quantile reads whichever spell its blocks fell in (with a tight interval), while
    its ratio to the reference blocks around them does not move, and the reference is timed on past the spell
    (``reference_span_s``, on the simulated clock here)."""
    monkeypatch.setattr(timing, "host_steal_ticks", lambda: 0)
    true_ms = {"layer": 0.02, "block": 0.1, "subnet": 1.0, "large": 3.0, "xl": 5.0}
    estimators = {"paired": {}, "paired_every_2": {"reference_every": 2}, "quantile": {"estimator": "quantile"}}
    worst = dict.fromkeys(estimators, 0.0)
    for seed in range(4):
        for name, settings in estimators.items():
            host = BurstyHost(seed, busy_ms=3000.0, quiet_ms=1500.0)
            protocol = Standalone(seed=seed, budget_s=5.0, burn_in_s=0.0, span_s=0.0, **settings)
            runners = {k: HostRunner(host, ms) for k, ms in true_ms.items()}
            stats = time_models(runners, protocol)
            errors = [abs(stats[k]["mean_ms"] / ms - 1) for k, ms in true_ms.items()]
            worst[name] = max(worst[name], *errors)
            if name != "quantile":
                assert all(0 < stats[k]["ci_pct"] <= 2 and stats[k]["count"] >= 15 for k in true_ms)
    assert worst["paired"] <= 0.03 and worst["paired_every_2"] <= 0.03 < 0.3 < worst["quantile"], worst


class LoggedRunner(Runner):
    """A model of constant latency that logs its name for every block (a call of at least 3: sizing calls are 1)."""

    def __init__(self, name: str, ms: float, log: list[str]) -> None:
        self.name, self.ms, self.log = name, ms, log

    def times(self, calls):
        if calls >= 3:
            self.log.append(self.name)
        return np.full(calls, self.ms), np.full(calls, self.ms)


def test_a_reference_block_every_two_model_blocks_brackets_each_group(monkeypatch):
    """``reference_every=2``: two model blocks between reference blocks, a third fewer reference blocks, and each
    model's figure still its ratio to the reference blocks around its group times the reference's."""
    monkeypatch.setattr(timing, "host_steal_ticks", lambda: 0)
    quick = {"warmup": 0, "blocks": 4, "block_ms": 1.0, "budget_s": 0.0, "burn_in_s": 0.0, "span_s": 0.0}
    quick |= {"reference_span_s": 0.0, "reference_budget_s": 0.0}
    true_ms, sequences = {"a": 0.1, "b": 0.2, "c": 0.3, "ref": 1.0}, {}
    for every in (1, 2):
        log: list[str] = []
        stats = time_models(
            {k: LoggedRunner(k, ms, log) for k, ms in true_ms.items()}, Standalone(reference_every=every, **quick)
        )
        assert all(stats[k]["mean_ms"] == pytest.approx(ms) for k, ms in true_ms.items())
        groups = "".join("|" if name == "ref" else name for name in log).strip("|").split("|")
        assert max(map(len, groups)) == every and log[0] == log[-1] == "ref", log
        sequences[every] = log
    assert [len(s) - s.count("ref") for s in sequences.values()] == [12, 12]  # 4 blocks of each of 3 models
    assert [s.count("ref") for s in sequences.values()] == [13, 9]  # one, then one after each group of a round
    assert "a reference block every 2 model blocks" in Standalone(reference_every=2).describe()
    assert protocol_from_dict({"kind": "standalone", "estimator": "paired"}).reference_every == 1
    with pytest.raises(OFAError, match=r"protocol.reference_every: expected an integer >= 1, got 0"):
        Standalone(reference_every=0)
    assert Standalone().estimator == "paired" and "reference model's q10" in Standalone().describe()
    assert "reference_quantile" not in Standalone(estimator="quantile").to_dict()


class SlowStartRunner(Runner):
    """Calls of ``slow_ms`` for its first 0.3 s of wall time, then of 1.0 ms (slept, so that blocks take the
    wall time they report): a model just loaded, or one timed during a host burst."""

    def __init__(self, slow_ms: float) -> None:
        self.start, self.slow_ms = time.perf_counter(), slow_ms

    def times(self, calls):
        ms = self.slow_ms if time.perf_counter() - self.start < 0.3 else 1.0
        time.sleep(calls * ms / 1e3)
        wall = np.full(calls, ms)
        return wall, wall.copy()


def test_the_burn_in_outlasts_the_slow_first_second_of_freshly_loaded_models(monkeypatch):
    """Without it a few models reach their stopping rule inside the slow stretch and keep its figure."""
    monkeypatch.setattr(timing, "host_steal_ticks", lambda: 0)
    quick = {"blocks": 3, "block_ms": 1.0, "budget_s": 0.0, "warmup": 1, "span_s": 0.0}
    cold = time_models({"m": SlowStartRunner(1.2)}, Standalone(**quick, burn_in_s=0.0))
    warm = time_models({"m": SlowStartRunner(1.2)}, Standalone(**quick, burn_in_s=0.5))
    assert cold["m"]["mean_ms"] == pytest.approx(1.2) and warm["m"]["mean_ms"] == pytest.approx(1.0)
    assert Standalone().burn_in_s == 1.0 and protocol_from_dict({"kind": "standalone"}).burn_in_s == 0.0
    with pytest.raises(OFAError, match=r"protocol.burn_in_s: expected seconds >= 0"):
        Standalone(burn_in_s=-1)


def test_a_model_timed_alone_spans_more_than_one_burst(monkeypatch):
    """Its blocks inside one burst agree with each other, so the interval alone would stop there with the
    burst's figure; the least span keeps it timing past the burst, and the low quantile drops the burst."""
    monkeypatch.setattr(timing, "host_steal_ticks", lambda: 0)
    quick = {"blocks": 3, "block_ms": 5.0, "budget_s": 0.0, "warmup": 1, "burn_in_s": 0.0}
    inside = time_models({"m": SlowStartRunner(1.5)}, Standalone(**quick, span_s=0.0))
    spanned = time_models({"m": SlowStartRunner(1.5)}, Standalone(**quick, span_s=0.5))
    assert inside["m"]["mean_ms"] == pytest.approx(1.5) and spanned["m"]["mean_ms"] == pytest.approx(1.0)
    assert Standalone().span_s == 1.0 and protocol_from_dict({"kind": "standalone"}).span_s == 0.0
    assert "span_s" in Standalone().to_dict()
    with pytest.raises(OFAError, match=r"protocol.span_s: expected seconds >= 0"):
        Standalone(span_s=-1)


def test_quantile_interval_narrows_with_blocks_and_covers_the_true_quantile():
    rng = np.random.default_rng(0)
    widths = [quantile_stats(1 + rng.exponential(0.1, n), 0.25)["ci_pct"] for n in (15, 60, 240)]
    assert widths[0] > widths[1] > widths[2]
    true_q = 1 + 0.1 * np.log(1 / 0.75)  # q25 of 1 + Exp(0.1)
    trials = [quantile_stats(1 + rng.exponential(0.1, 30), 0.25) for _ in range(400)]
    covered = np.mean([s["ci_low_ms"] <= true_q <= s["ci_high_ms"] for s in trials])
    assert covered >= 0.93  # a 95% interval
    s = trials[0]
    assert s["ci_pct"] == pytest.approx(100 * (s["ci_high_ms"] - s["ci_low_ms"]) / 2 / s["mean_ms"])


def test_blocks_with_host_steal_are_left_out_and_timed_again(monkeypatch):
    reads = iter([0, 1, 1, 2, 2, 3] + [3] * 100)  # read before and after each block: the first three see steal
    monkeypatch.setattr(timing, "host_steal_ticks", lambda: next(reads))
    runner = ScriptedRunner("m", 1.0, lambda i, calls: (np.ones(calls), np.ones(calls)), [])
    stats = time_models(
        {"m": runner}, Standalone(blocks=5, budget_s=0.0, block_ms=1.0, warmup=0, burn_in_s=0.0, span_s=0.0)
    )
    assert stats["m"]["steal_blocks"] == 3 and stats["m"]["count"] == 5 and runner.invocations == 1 + 8
    assert protocol_from_dict({"kind": "standalone", "blocks": 7}).estimator == "median"  # tables from before


def no_burn_in(protocol):
    """``protocol`` without its untimed burn-in and least span: seconds of real time per timing, where no figure
    is judged."""
    spans = {k: v for k, v in NO_SPANS.items() if k != "budget_s"}  # the protocol's own budget stays
    return replace(protocol, **spans) if isinstance(protocol, Standalone) else protocol


def time_without_burn_in(models, protocol, progress=None):
    """`time_models` as a table build or check calls it, with `no_burn_in` of its protocol."""
    return time_models(models, no_burn_in(protocol))


def noisy_after(first_quiet: int, timings: list):
    """A `time_models` whose first ``first_quiet`` timings are quiet and every later one noisy (±40%)."""

    def scripted(models, protocol, progress=None):
        timings.append(len(models))
        noise = 0.0 if len(timings) <= first_quiet else 40.0
        measured = time_models(models, no_burn_in(protocol))  # the figures are real; the noise is scripted
        return {k: {**s, "ci_pct": noise, "spread_pct": 2 * noise} for k, s in measured.items()}

    return scripted


def test_strict_noise_limit_stops_in_one_line_and_keeps_what_was_measured(tmp_path, monkeypatch, capsys):
    space, out, timings = small_space(), tmp_path / "t.yaml", []
    monkeypatch.setattr(lut_build, "time_models", noisy_after(1, timings))  # the first resolution quiet
    with pytest.raises(
        OFAError,
        match=r"too noisy to measure at 12 px: .*±40\.0%, ±40\.0%, ±40\.0% .*--max-noise 5%"
        r".*resolutions \[8\] kept",
    ) as info:
        build_table(space, build(out, max_noise_pct=5.0))
    assert "\n" not in str(info.value) and len(timings) == 1 + lut_build.NOISE_ATTEMPTS
    doc = yaml.safe_load(out.read_text())
    assert doc["meta"]["resolutions_done"] == [8] and not any(k.startswith("stem:in=12x12") for k in doc["entries"])
    record = doc["meta"]["noise"]["per_resolution"]
    assert list(record) == [8] and record[8]["noise_pct"] == 0.0 and record[8]["max_pct"] == 5.0
    assert record[8]["attempts"] == 1 and record[8]["noisy"] is False

    monkeypatch.setattr(lut_build, "time_models", noisy_after(0, timings))  # from now on every timing is noisy:
    # with --max-noise the CLI says so in one line and writes nothing
    fresh, space_file = tmp_path / "fresh.yaml", tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump({"space": space.to_dict()}))
    argv = ["lut", "build", "--space", str(space_file), "--out", str(fresh), "--repeats", "2", "--calls", "2",
            "--calibrate", "3", "--time-budget", "0", "--block-ms", "1", "--quiet"]  # fmt: skip
    assert main([*argv, "--max-noise", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "too noisy to measure at 8 px" in err and not fresh.exists()


def test_noisy_build_warns_writes_and_remeasures_only_the_noisy_resolutions(tmp_path, monkeypatch, capsys):
    space, timings = small_space(), []
    out, space_file = tmp_path / "t.yaml", tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump({"space": space.to_dict()}))
    argv = ["lut", "build", "--space", str(space_file), "--out", str(out), "--repeats", "2", "--calls", "2",
            "--calibrate", "3", "--time-budget", "0", "--block-ms", "1", "--quiet"]  # fmt: skip
    monkeypatch.setattr(lut_build, "time_models", noisy_after(1, timings))  # 8 px quiet, 12 px noisy
    assert main(argv) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "warning: 12 px measured to ±40.0% only" in err[0] and "--remeasure-noisy" in err[0]
    meta = LatencyTable.load(out).meta
    assert meta["complete"] and meta["resolutions_done"] == [8, 12]
    assert lut_build.noisy_resolutions(meta) == [12] and meta["noise"]["per_resolution"][12]["spread_pct"] == 80.0
    before, timed = yaml.safe_load(out.read_text())["entries"], meta["noise"]["per_resolution"]
    monkeypatch.setattr(lut_build, "utc_timestamp", lambda: "later")  # each resolution records when it was timed

    timings.clear()
    monkeypatch.setattr(lut_build, "time_models", noisy_after(99, timings))  # a quiet machine now
    assert main([*argv, "--remeasure-noisy"]) == 0
    assert len(timings) == 1 and capsys.readouterr().err.strip() == ""  # 12 px alone timed again, no warning
    meta = LatencyTable.load(out).meta
    assert lut_build.noisy_resolutions(meta) == [] and meta["resolutions_done"] == [8, 12]
    dates = {r: rec["date"] for r, rec in meta["noise"]["per_resolution"].items()}
    assert dates == {8: timed[8]["date"], 12: "later"} and timed[8]["date"].endswith("+00:00")
    after = yaml.safe_load(out.read_text())["entries"]
    assert set(after) == set(before)
    kept = set(LayerModules(space).for_resolution(8))
    assert kept and all(after[k] == before[k] for k in kept)  # 8 px was not timed again


def test_interleaved_protocol_and_thread_clock_stay_available(tmp_path, monkeypatch):
    protocol = Interleaved(warmup=1, rounds=4, prime=1, calls=1, keep=0.5, trim=0.0)
    monkeypatch.setattr(lut_check, "time_models", time_without_burn_in)
    as_checked = lut_check.check_protocol  # the user's check pairs its subnets with a reference: no spans either
    monkeypatch.setattr(lut_check, "check_protocol", lambda table, cfg: no_burn_in(as_checked(table, cfg)))
    table = build_table(small_space(resolutions=(8,)), build(tmp_path / "t.yaml", protocol=protocol))
    assert table.meta["protocol"]["kind"] == "interleaved-rounds" and table.meta["clock"] == "thread-cpu-time"
    assert protocol_from_dict(table.meta["protocol"]) == protocol
    own = check_table(table, CheckConfig(n=2, protocol="table", progress=False))
    assert own.summary["protocol"]["kind"] == "interleaved-rounds" and own.summary["clock"] == "thread-cpu-time"
    user = check_table(table, CheckConfig(n=2, repeats=2, budget_s=0.0, progress=False))  # as a user measures
    assert user.summary["protocol"]["kind"] == "standalone" and user.summary["clock"] == "wall"
    assert user.summary["protocol"]["blocks"] == 2
    assert with_overrides(Standalone(), {"repeats": 4, "clock": "thread"}).clock_name("cpu", 1) == "thread-cpu-time"
    assert with_overrides(protocol, {"repeats": 9}).rounds == 9
    with pytest.raises(OFAError, match=r"protocol.clock: 'auto' is not one of \['wall', 'thread'\]"):
        with_overrides(Standalone(), {"clock": "auto"})
    with pytest.raises(OFAError, match=r"protocol\.reference_every: the interleaved-rounds protocol has no such"):
        with_overrides(protocol, {"reference_every": 2})
    with pytest.raises(OFAError, match="kind: 'fastest' is not one of"):
        protocol_from_dict({"kind": "fastest"})


def test_export_measurement_is_standalone_whatever_built_the_table(space):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
    proto = onnx.load_from_string(export_onnx(model, (1, 3, 16, 16)))
    table = synthetic_table(space)
    interleaved = LatencyTable({**table.meta, "protocol": Interleaved().to_dict()}, table.entries)
    latency = measure_latencies({"fp32": proto}, model, (1, 3, 16, 16), interleaved)["fp32"]
    assert latency.source.startswith("standalone, wall clock, q25 of at least 15 blocks") and latency.samples >= 15
    fast = measure_latencies({"fp32": proto}, model, (1, 3, 16, 16), table)["fp32"]  # the table's own settings
    assert fast.samples == FAST.blocks and fast.mean_ms > 0


def test_bench_plain_loop_is_its_own_timer_around_session_run(monkeypatch):
    imported = {
        node.module
        for node in ast.walk(ast.parse(Path(standalone_latency.__file__).read_text()))
        if isinstance(node, ast.ImportFrom)
    }
    assert "search.latency" in imported and not imported & {"ofa.lut.timing", "ofa.runtime.runtimes"}
    now, order = [0.0], []
    # model a: repeat 1 inside a burst (medians 9 ms), repeat 2 quiet (2 ms); model b: 4 then 3 ms
    durations = {
        "a": iter([1.0] * 2 + [0.009, 0.008, 0.010, 0.002, 0.001, 0.003]),
        "b": iter([1.0] * 2 + [0.004] * 3 + [0.003] * 3),
    }

    def call(name):
        def run():
            order.append(name)
            now[0] += next(durations[name])

        return run

    monkeypatch.setattr(standalone_latency, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    figures = standalone_latency.best_of_repeats([call("a"), call("b")], warmup=2, calls=3, repeats=2)
    assert figures == pytest.approx([2.0, 3.0])  # each model's least repeat median, in ms
    assert order == list("aabb" + "aaabbb" * 2)  # warm-ups, then the models take their repeats in turn
    monkeypatch.undo()
    model = export_onnx(torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3)), (1, 1, 8, 8))
    (ms,) = standalone_latency.Loop(warmup=2, calls=10, repeats=2).figures([standalone_latency.onnxruntime_call(model)])
    assert ms > 0
    rows = [{"predicted_ms": p, "measured_ms": 1.0} for p in (1.05, 0.92, 1.2, 0.7)]
    assert standalone_latency.share_within(rows) == 50.0 and standalone_latency.share_within([]) is None
    again = [{"measured_ms": 1.0, "retest_ms": r} for r in (1.05, 0.95, 1.3, 0.5)]  # two within ±10% of the first
    assert standalone_latency.retest_within(again) == 50.0 and standalone_latency.retest_within([]) is None


def test_plain_loop_runs_an_int8_tables_subnets_quantized_as_the_table_did(monkeypatch):
    seen = []
    monkeypatch.setattr(standalone_latency, "onnxruntime_call", lambda model: seen.append(model) or (lambda: None))
    module, shape = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU()).eval(), (1, 1, 8, 8)
    standalone_latency.runtime_call("ort-cpu", module, shape, "int8")
    standalone_latency.runtime_call("ort-cpu", module, shape)
    ops = [{node.op_type for node in onnx.load_from_string(model).graph.node} for model in seen]
    assert "QuantizeLinear" in ops[0] and "QuantizeLinear" not in ops[1] and "Conv" in ops[1]


def test_quiet_rounds_drop_busy_rounds_for_every_model():
    rng = np.random.default_rng(0)
    base = np.array([0.1, 1.0, 10.0])[:, None]
    busy = rng.random(40) < 0.4  # 40% of rounds: the whole machine 1.5x slower
    samples = base * np.where(busy, 1.5, 1.0)[None, :] * (1 + 0.01 * rng.standard_normal((3, 40)))
    kept = quiet_rounds(samples, 0.5)
    assert not busy[kept].any()
    stats = summarize({"a": samples[0], "b": samples[1], "c": samples[2]}, Interleaved(keep=0.5, trim=0.1))
    np.testing.assert_allclose([stats[n]["mean_ms"] for n in "abc"], base[:, 0], rtol=0.02)
    assert trimmed_stats([1.0] * 8 + [100.0, 0.0], 0.1)["mean_ms"] == pytest.approx(1.0)


def test_fit_correction_recovers_an_affine_map():
    raw = np.linspace(1.0, 5.0, 10)
    assert fit_correction(raw, 0.8 * raw + 0.3) == pytest.approx((0.8, 0.3))
    assert fit_correction([2.0, 2.0], [1.0, 1.0]) == pytest.approx((0.5, 0.0))  # no spread: scale only


def test_calibration_archs_span_the_range(space):
    archs = calibration_archs(space, 16, 6, seed=0)
    assert archs[:2] == [space.min_arch(16), space.max_arch(16)] and len(set(archs)) == 6
    assert archs == calibration_archs(space, 16, 6, seed=0)


def test_calibration_archs_compare_subnets_not_unused_slots():
    """A space with fewer subnets than asked for gives each of them once (unused slots ignored)."""
    space = small_space(stages=(StageSpec(8, 2, False, "relu"),), expands=(2,))  # 2 + 2 * 2 = 6 subnets
    archs = calibration_archs(space, 8, 10, seed=0)
    layout = GeneLayout.of(space)
    keys = {layout.canonical(layout.encode(a)).tobytes() for a in archs}
    assert space.count() == 6 and len(archs) == len(keys) == 6
    assert archs[:2] == [space.min_arch(8), space.max_arch(8)]


def test_two_subnet_space_builds_and_check_says_what_it_needs(tmp_path, capsys):
    space = small_space(stages=(StageSpec(8, 2, False, "relu"),), depths=(1,), kernels=(3,), resolutions=(8,))
    assert space.count() == 2
    table = build_table(space, build(tmp_path / "t.yaml", calibrate=10))
    assert len(table.calibration_archs()) == 2 and table.probes(8) == []  # every subnet calibrates
    assert table.meta["complete"]
    assert main(["lut", "check", str(tmp_path / "t.yaml"), "--n", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "ofa lut: error: resolution 8: the space has fewer than 1 subnets outside the calibration set"


def test_measure_onnx_times_an_exported_model(tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
    path = export_onnx(model, (1, 3, 16, 16), tmp_path / "m.onnx")
    stats = measure_onnx(
        path, (1, 3, 16, 16), TimingConfig(protocol=Standalone(blocks=5, calls=4, warmup=1, burn_in_s=0.0, span_s=0.0))
    )
    assert stats["mean_ms"] > 0 and stats["count"] >= 5
    with pytest.raises(OFAError, match="not found"):
        measure_onnx(tmp_path / "nope.onnx", (1, 3, 16, 16))
    with pytest.raises(OFAError, match=r"input of shape \[1, 3, 9\]"):
        measure_onnx(path, (1, 3, 9))
    with pytest.raises(OFAError, match="onnxruntime backend"):
        measure_onnx(path, (1, 3, 16, 16), TimingConfig(backend="torch-cpu"))


# ------------------------------------------------------------------------------------------ build
def test_build_is_resumable_and_never_remeasures(tmp_path, monkeypatch):
    space, out = small_space(), tmp_path / "t.yaml"

    def interrupt(resolution):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_table(space, build(out), on_resolution_done=interrupt)
    first = yaml.safe_load(out.read_text())
    assert first["meta"]["resolutions_done"] == [8] and first["meta"]["complete"] is False
    with pytest.raises(OFAError, match="unfinished"):
        LatencyTable.load(out)

    measured = []
    original = lut_build._measure_resolution
    monkeypatch.setattr(
        lut_build, "_measure_resolution", lambda sp, r, *a, **k: (measured.append(r), original(sp, r, *a, **k))
    )
    table = build_table(space, build(out))
    assert measured == [12]
    assert all(table.entries[k] == v for k, v in first["entries"].items())  # 8 px entries kept as they were
    assert table.meta["complete"] and sorted(table.meta["correction"]["per_resolution"]) == [8, 12]
    assert len(table.calibration_archs()) == 6 and table.meta["overhead_ms"] > 0
    arch = space.max_arch(12)
    scale, offset = table.correction(12)
    assert table.predict(arch) == pytest.approx(scale * table.predict_raw(arch) + offset)

    build_table(space, build(out))  # complete: nothing measured
    assert measured == [12]
    with pytest.raises(OFAError, match="threads=1, this build asks 2"):
        build_table(space, build(out, threads=2))


def test_torch_cpu_backend_builds_without_overhead(tmp_path):
    table = build_table(small_space(resolutions=(8,)), build(tmp_path / "t.yaml", backend="torch-cpu", calibrate=0))
    assert table.meta["runtime"] == "torch" and table.meta["overhead_ms"] == 0.0
    assert table.correction(8) == (1.0, 0.0)
    assert table.predict(table.space.max_arch()) > table.predict(table.space.min_arch())


# ------------------------------------------------------------------------------------------ CLI end to end
def test_cli_build_then_check(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(lut_build, "time_models", time_without_burn_in)
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump({"space": small_space().to_dict()}))
    table_path, out = tmp_path / "tiny.yaml", tmp_path / "check"
    assert (
        main(
            [
                "lut",
                "build",
                "--space",
                str(space_file),
                "--out",
                str(table_path),
                "--repeats",
                "4",
                "--calls",
                "3",
                "--warmup",
                "1",
                "--calibrate",
                "3",
                "--max-noise",
                "1e6",
                "--time-budget",
                "0",
                "--block-ms",
                "2",
                "--quiet",
            ]
        )
        == 0
    )
    meta = LatencyTable.load(table_path).meta
    assert meta["command"].startswith("ofa lut build --space") and meta["complete"]
    assert meta["protocol"]["kind"] == "standalone" and meta["clock"] == "wall"
    assert meta["protocol"]["blocks"] == 4 and meta["protocol"]["calls"] == 3
    assert set(meta["noise"]["per_resolution"]) == {8, 12} and "95% confidence" in meta["noise"]["criterion"]
    assert meta["protocol"]["estimator"] == "paired" and meta["protocol"]["budget_s"] == 0
    assert meta["protocol"]["block_ms"] == 2
    capsys.readouterr()
    # subnets are loaded and timed in blocks (here of at most 5 models, the probes in each resolution's first)
    # beside one reference loaded throughout the resolution (the paired estimator), at known latencies: 8 px
    # subnets at their prediction, 12 px ones at twice it, each 2% slower when loaded again (the retest), the
    # probes 1.25x their figure at the build (the machine drifted)
    table = LatencyTable.load(table_path)
    built = {a.short(): ms for r in (8, 12) for a, ms in table.probes(r)}
    loads, seen = [], set()

    class Known(Runner):
        def __init__(self, ms: float) -> None:
            self.ms = ms

        def times(self, calls: int) -> tuple[np.ndarray, np.ndarray]:
            return np.full(calls, self.ms), np.full(calls, self.ms)

    def known_runners(space, archs, *args):
        loads.append(len(archs))
        runners = {}
        for i, arch in enumerate(archs):
            if arch.short() in built:
                ms = 1.25 * built[arch.short()]
            else:
                again = arch.short() in seen
                seen.add(arch.short())
                ms = table.predict(arch) * (2.0 if arch.resolution == 12 else 1.0) * (1.02 if again else 1.0)
            runners[f"{i}:{arch.short()}"] = Known(ms)
        return runners

    monkeypatch.setattr(lut_check, "MAX_LOADED", 5)
    monkeypatch.setattr(lut_check, "subnet_runners", known_runners)
    monkeypatch.setattr(Standalone, "_burn_in", lambda self, runners: None)  # no second of untimed calls
    assert (
        main(
            [
                "lut",
                "check",
                str(table_path),
                "--space",
                str(space_file),
                "--n",
                "4",
                "--repeats",
                "4",
                "--time-budget",
                "0",
                "--out",
                str(out),
                "--json",
                "--quiet",
            ]
        )
        == 0
    )
    # the reference, the first block and its probes, the second block, the first block again (the retest)
    assert loads == [1, 2, lut_build.PROBES, 2, 2] * 2
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["n"] == 8 and set(summary["per_resolution"]) == {"8", "12"}
    per = summary["per_resolution"]
    assert all(s["machine_drift"] == 1.25 and s["noise_pct"] == 2.0 for s in per.values())
    assert per["8"]["mape"] == 0.0 and per["8"]["within_10pct"] == 100.0  # measured as predicted
    assert per["12"]["mape"] == pytest.approx(50.0, abs=0.1) and per["12"]["within_10pct"] == 0.0  # half of it
    assert per["8"]["drift_adjusted"]["mape"] == pytest.approx(25.0, abs=0.1)  # 1.25x slower, divided out
    assert summary["protocol"]["kind"] == "standalone" and summary["protocol"]["blocks"] == 4
    assert {"mape", "within_10pct", "spearman"} <= set(summary) and summary["within_10pct"] == 50.0
    assert summary["mape"] == pytest.approx(25.0, abs=0.1)
    rows = [json.loads(line) for line in (out / "check.jsonl").read_text().splitlines()]
    reserved = {json.dumps(a.to_dict()) for a in table.calibration_archs()}
    reserved |= {json.dumps(a.to_dict()) for r in (8, 12) for a, _ in table.probes(r)}
    assert len(table.probes(8)) == lut_build.PROBES and len(reserved) == 2 * (3 + lut_build.PROBES)
    assert len(rows) == 8 and not {json.dumps(r["arch"]) for r in rows} & reserved
    assert (out / "check.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_errors_are_one_line(tmp_path, capsys):
    cases = [
        (["lut", "check", str(tmp_path / "missing.yaml")], "latency table not found"),
        (
            ["lut", "build", "--space", "mbv3", "--out", str(tmp_path / "t.yaml"), "--backend", "tpu"],
            "unknown backend 'tpu'",
        ),
        (
            ["lut", "build", "--space", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "t.yaml")],
            "space not found",
        ),
    ]
    if not torch.cuda.is_available():
        cases.append(
            (
                ["lut", "build", "--space", "mbv3", "--out", str(tmp_path / "t.yaml"), "--backend", "torch-cuda"],
                "needs a CUDA GPU",
            )
        )
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1 and err.startswith("ofa lut: error:")
    assert not (tmp_path / "t.yaml").exists()
