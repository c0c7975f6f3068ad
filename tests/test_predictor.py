"""Accuracy predictor and its data: encoding, fit quality, files, and resumable/sharded collection."""

import json

import numpy as np
import pytest
import torch
from helpers import perturb, tiny_space

from ofa.cli import main
from ofa.data.datasets import data_from_meta
from ofa.families.mbv3.encoding import GeneLayout
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.families.registry import layout_of
from ofa.train.distributed import DistEnv
from ofa.train.evaluate import evaluate_arch
from ofa.utils.errors import OFAError
from search.latency import space_from_arg
from search.predictor.accuracy_file import FILE_KIND, AccuracyData, load_accuracy, part_path, read_accuracy
from search.predictor.collect import CollectConfig, collect, subnet_arch
from search.predictor.fit import FitConfig, fit_predictor
from search.predictor.model import PREDICTOR_FORMAT, SMALL_BATCH, AccuracyPredictor, kendall_tau


def synthetic_top1(space, rows):
    """A known, saturating accuracy function of the arch (what a real supernet's accuracy looks like)."""
    rng = np.random.default_rng(1)
    wk = rng.uniform(0.1, 1.0, (space.num_slots, len(space.kernels))).cumsum(1)
    we = rng.uniform(0.1, 1.0, (space.num_slots, len(space.expands))).cumsum(1)
    layout = GeneLayout.of(space)
    sl, act = layout.slices, layout.active_slots(rows)
    slots = np.arange(space.num_slots)
    score = (act * (wk[slots, rows[:, sl["kernels"]]] + we[slots, rows[:, sl["expands"]]])).sum(1)
    score = score + rows[:, layout.resolution]
    return 60.0 + 30.0 * np.tanh(score / 15.0)


def measured(space, rows, top1, halves=None):
    return AccuracyData(space, rows, top1, halves, {})


def test_fit_recovers_a_known_accuracy_function(space, tmp_path):
    rows = GeneLayout.of(space).sample(700, np.random.default_rng(0))
    top1 = synthetic_top1(space, rows)
    curve = []
    fit = fit_predictor(
        measured(space, rows, top1), FitConfig(seed=0, max_epochs=200, patience=20), on_epoch=curve.append
    )
    model, report = fit.predictor, fit.report
    # three disjoint splits: fit, early stopping, and the reported test split
    assert (report.test_size, report.stop_size, report.train_size) == (140, 105, 455)
    assert report.tau >= 0.9, report.summary()
    assert report.rmse < 0.35 * report.spread
    assert curve[-1]["epoch"] == report.epochs and report.best_epoch <= report.epochs
    assert min(m["stop_rmse"] for m in curve) == pytest.approx(report.stop_rmse, rel=1e-4)
    test_rows = fit.test["rows"]
    assert report.rmse == pytest.approx(
        float(np.sqrt(np.mean((model.predict_batch(test_rows) - synthetic_top1(space, test_rows)) ** 2))), rel=1e-6
    )
    # fresh subnets, never seen in training or early stopping
    fresh = GeneLayout.of(space).sample(300, np.random.default_rng(99))
    assert kendall_tau(model.predict_batch(fresh), synthetic_top1(space, fresh)) >= 0.9
    # same seed, same predictor
    short = [
        fit_predictor(measured(space, rows, top1), FitConfig(seed=0, max_epochs=8)).predictor.predict_batch(fresh)
        for _ in range(2)
    ]
    assert np.array_equal(short[0], short[1])

    # file round trip keeps predictions and refuses other spaces
    model.save(tmp_path / "p.pt")
    loaded = AccuracyPredictor.load(tmp_path / "p.pt")
    assert np.allclose(loaded.predict_batch(fresh), model.predict_batch(fresh), atol=1e-5)
    assert loaded.metrics["tau"] == report.tau
    first = GeneLayout.of(space).decode(fresh[0])
    assert loaded.predict(first) == pytest.approx(float(model.predict_batch(fresh[:1])[0]), abs=1e-4)
    loaded.check_space(tiny_space(), "the supernet")
    with pytest.raises(OFAError, match="predictor was fitted on space"):
        loaded.check_space(tiny_space(kernels=(3, 5)), "the supernet")


def test_predictor_file_errors(space, tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    with pytest.raises(OFAError, match="not a readable accuracy predictor"):
        AccuracyPredictor.load(tmp_path / "junk.pt")
    OFAMobileNetV3(space).save(tmp_path / "supernet.pt")
    with pytest.raises(OFAError, match="not an accuracy predictor"):
        AccuracyPredictor.load(tmp_path / "supernet.pt")
    with pytest.raises(OFAError, match="at least 10"):
        fit_predictor(
            measured(space, GeneLayout.of(space).sample(5, np.random.default_rng(0)), np.arange(5.0)), FitConfig()
        )
    with pytest.raises(OFAError, match="--test-fraction must be between 0 and 1"):
        FitConfig(test_fraction=1.5)
    bare = {"format": PREDICTOR_FORMAT, "hidden": 4, "layers": 1, "state_dict": {}}
    torch.save(bare, tmp_path / "nospace.pt")
    with pytest.raises(OFAError, match="lacks 'space'"):
        AccuracyPredictor.load(tmp_path / "nospace.pt")


DATA = {
    "name": "synthetic",
    "image_size": 20,
    "val_fraction": 0.3,
    "augment": "light",
    "synthetic": {"train_size": 90, "test_size": 16, "num_classes": 4, "channels": 1},
}


@pytest.fixture(scope="module")
def supernet(tmp_path_factory):
    torch.manual_seed(0)
    net = perturb(OFAMobileNetV3(tiny_space(in_channels=1, num_classes=4))).eval()
    path = tmp_path_factory.mktemp("net") / "supernet.pt"
    net.save(path, meta={"data": DATA})
    return path


def test_collect_resume_and_shards(supernet, tmp_path):
    net = OFAMobileNetV3.load(supernet)
    data = data_from_meta(net.meta)
    kw = dict(seed=3, calib_batches=2, batch_size=16, repeat_split=True, progress=False)
    out = tmp_path / "acc.jsonl"
    assert collect(net, data, out, CollectConfig(3, **kw)).measured == 3
    header, recs = read_accuracy(out)
    assert header["kind"] == FILE_KIND and header["repeat_split"] and header["val_images"] == len(data.val)
    assert [r["index"] for r in recs] == [0, 1, 2]
    for r in recs:
        assert r["arch"] == subnet_arch(net.space, 3, r["index"]).to_dict()
        assert r["count_a"] + r["count_b"] == r["count"] == len(data.val)
        assert r["top1"] == pytest.approx((r["top1_a"] * r["count_a"] + r["top1_b"] * r["count_b"]) / r["count"])
    # the measurement is BN recalibration on training images + validation accuracy, independent of order
    from torch.utils.data import DataLoader, Subset

    calib_ids = np.random.default_rng(3).permutation(len(data.train))[:32].tolist()
    arch = subnet_arch(net.space, 3, 1)
    direct = evaluate_arch(
        net,
        arch,
        DataLoader(Subset(data.train, calib_ids), batch_size=16),
        DataLoader(data.val, batch_size=16),
        calib_batches=2,
    )
    assert recs[1]["top1"] == pytest.approx(direct["top1"]) and recs[1]["loss"] == pytest.approx(direct["loss"])

    # a crash mid-line is dropped; rerunning extends to a larger --n without redoing finished subnets
    with open(out, "a") as f:
        f.write('{"index": 3, "arch": {"resolu')
    assert collect(net, data, out, CollectConfig(5, **kw)).measured == 2
    header, recs = read_accuracy(out)
    assert [r["index"] for r in recs] == [0, 1, 2, 3, 4]
    assert all(line.startswith("{") and line.endswith("}") for line in out.read_text().splitlines())
    assert collect(net, data, out, CollectConfig(5, **kw)).measured == 0

    # other settings or other weights cannot be mixed into the same file
    with pytest.raises(OFAError, match="seed=3"):
        collect(net, data, out, CollectConfig(6, **{**kw, "seed": 4}))
    other = perturb(OFAMobileNetV3(net.space), seed=1)
    with pytest.raises(OFAError, match="weights="):
        collect(other, data, out, CollectConfig(6, **kw))

    # two ranks share the subnets (each into its part file), rank 0 merges: same numbers as one process
    sharded = tmp_path / "sharded.jsonl"
    rank = [DistEnv(r, 2, 0, torch.device("cpu")) for r in range(2)]
    assert collect(net, data, sharded, CollectConfig(5, **kw), rank[1]).measured == 2
    assert part_path(sharded, 1).is_file()
    assert collect(net, data, sharded, CollectConfig(5, **kw), rank[0]).measured == 3  # (barrier,) merge
    assert not part_path(sharded, 1).exists() and not part_path(sharded, 0).exists()
    assert read_accuracy(sharded)[1] == recs

    data_arrays = load_accuracy(out)
    assert data_arrays.rows.shape == (5, GeneLayout.of(net.space).genes) and data_arrays.halves is not None
    assert np.array_equal(data_arrays.top1, [r["top1"] for r in recs])


def test_cli_collect_and_fit(supernet, tmp_path, capsys):
    out = tmp_path / "acc.jsonl"
    assert (
        main(
            [
                "predictor",
                "collect",
                str(supernet),
                "--n",
                "2",
                "--out",
                str(out),
                "--calib-batches",
                "1",
                "--batch-size",
                "16",
                "--repeat-split",
            ]
        )
        == 0
    )
    assert "holds 2 subnet(s)" in capsys.readouterr().out
    header, recs = read_accuracy(out)
    assert len(recs) == 2 and header["supernet"] == str(supernet)

    # fit from a collection file: synthetic accuracies (a real collection of this size would be noise)
    space = tiny_space(in_channels=1, num_classes=4)
    rows = GeneLayout.of(space).sample(120, np.random.default_rng(0))
    top1 = synthetic_top1(space, rows)
    noise = np.random.default_rng(1).normal(0, 0.5, (2, len(rows)))
    lines = [dict(header, repeat_split=True)] + [
        {"index": i, "arch": GeneLayout.of(space).decode(r).to_dict(), "top1": t, "top1_a": t + a, "top1_b": t + b}
        for i, (r, t, a, b) in enumerate(zip(rows, top1, *noise))
    ]
    acc = tmp_path / "synthetic.jsonl"
    acc.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main(["predictor", "fit", str(acc), "--epochs", "30", "--hidden", "64"]) == 0
    printed = capsys.readouterr().out
    assert "Kendall tau" in printed and "test-retest tau" in printed
    model = AccuracyPredictor.load(tmp_path / "predictor.pt")
    assert model.hidden == 64 and model.metrics["retest_tau"] > 0.5
    assert (tmp_path / "predictor.fit.png").read_bytes()[:4] == b"\x89PNG"
    assert len((tmp_path / "predictor.fit.jsonl").read_text().splitlines()) == model.metrics["epochs"]

    # bad inputs: one line, exit 2
    assert main(["predictor", "fit", str(tmp_path / "missing.jsonl")]) == 2
    assert "accuracy file not found" in capsys.readouterr().err
    assert main(["predictor", "fit", str(supernet)]) == 2
    assert "predictor: error:" in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text(
        "".join(json.dumps(x) + "\n" for x in lines[:20])
        + json.dumps({"index": 99, "arch": lines[1]["arch"], "top1": 50.0})
        + "\n"
    )
    assert main(["predictor", "fit", str(broken)]) == 2
    assert "subnet 99: 'top1_a' missing" in capsys.readouterr().err
    assert main(["predictor", "collect", str(supernet), "--n", "0"]) == 2
    assert "--n must be positive" in capsys.readouterr().err


@pytest.mark.parametrize("preset", ["mbv3", "proxyless", "ofa_resnet50"])
def test_predict_batch_equals_the_module_forward(preset):
    """predict_batch applies the layers directly (no module calls): the same numbers as forward, the
    training path, on every family's encoding and on batches below and above the one-thread size."""
    space = space_from_arg(preset)
    torch.manual_seed(0)
    model = perturb(AccuracyPredictor(space, target_mean=75.0, target_std=5.0)).eval()
    for n in (1, 37, SMALL_BATCH + 5):
        rows = layout_of(space).sample(n, np.random.default_rng(n))
        with torch.no_grad():
            x = torch.from_numpy(model.encoder.encode_rows(rows))
            want = (model(x) * model.target_std + model.target_mean).double().numpy()
        got = model.predict_batch(rows)
        assert got.dtype == np.float64 and got.shape == (n,)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
