"""ONNX export: parity, metadata, the static PyTorch subnet, latency tables, INT8 and the error cases."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from helpers import known_call_ms, perturb, synthetic_table, tiny_space
from torch.utils.data import TensorDataset

from ofa import OFAMobileNetV3, load_subnet, recalibrate_bn
from ofa.cli import main
from ofa.data.loaders import make_loader
from ofa.export.export import ExportConfig, export_subnet
from ofa.export.verify import ParityError, check_parity, parity_tolerance
from ofa.families.mbv3.encoding import sample_arch
from ofa.runtime.convert import read_metadata
from ofa.runtime.runtimes import OrtModel
from ofa.utils.io import file_sha256


def fake_data(space, n_train=256, n_test=96, size=20, seed=0) -> SimpleNamespace:
    """A DataBundle stand-in: labelled random images with the fields export reads."""
    g = torch.Generator().manual_seed(seed)

    def split(n):
        return TensorDataset(
            torch.randn(n, space.in_channels, size, size, generator=g),
            torch.randint(0, space.num_classes, (n,), generator=g),
        )

    train = split(n_train)
    return SimpleNamespace(
        train=train,
        calib=train,  # as the default (data.calib_augment) has it
        val=split(32),
        test=split(n_test),
        num_classes=space.num_classes,
        class_names=[f"class{i}" for i in range(space.num_classes)],
        mean=[0.5] * space.in_channels,
        std=[0.25] * space.in_channels,
        in_channels=space.in_channels,
        image_size=size,
    )


@pytest.fixture(scope="module")
def net() -> OFAMobileNetV3:
    torch.manual_seed(0)  # the same weights whichever tests ran before
    return perturb(OFAMobileNetV3(tiny_space()), seed=3).eval()


@pytest.fixture(scope="module")
def data(net) -> SimpleNamespace:
    return fake_data(net.space)


@pytest.fixture(scope="module")
def ckpt(net, tmp_path_factory) -> Path:
    return net.save(tmp_path_factory.mktemp("ckpt") / "supernet.pt")


@pytest.fixture(scope="module")
def ckpt_with_data(net, tmp_path_factory) -> Path:
    """A supernet file whose meta names its training data, as `ofa train` writes it (synthetic images here)."""
    data = {
        "name": "synthetic",
        "image_size": 20,
        "augment": "none",
        "synthetic": {"channels": 3, "num_classes": 10, "train_size": 256, "test_size": 96},
    }
    return net.save(tmp_path_factory.mktemp("ckpt") / "trained.pt", meta={"data": data})


def ort_logits(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": x.astype(np.float32)})[0]


@pytest.mark.parametrize(
    ("which", "resolution", "dynamic", "opset"),
    [
        ("max", 20, True, 17),
        ("min", 12, False, 13),
        ("sample", 16, True, 20),
    ],
)
def test_parity_for_archs_resolutions_and_batch(net, data, tmp_path, which, resolution, dynamic, opset):
    space = net.space
    arch = {"max": space.max_arch, "min": space.min_arch, "sample": lambda r: sample_arch(space, 7, resolutions=[r])}[
        which
    ](resolution)
    out = tmp_path / "m.onnx"
    r = export_subnet(
        net,
        arch,
        ExportConfig(out, calib_batches=2, batch_size=32, dynamic_batch=dynamic, opset=opset, latency=False),
        data=data,
    )
    assert r.parity.ok and r.parity.max_abs_diff <= r.parity.allowed and r.parity.top1_agreement == 1.0
    assert r.parity.real_inputs == 64 and r.parity.random_inputs == 16
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == opset
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch" if dynamic else 1, space.in_channels, resolution, resolution]

    # The file itself, checked independently: same logits as the saved static PyTorch model.
    static = load_subnet(r.subnet_path)
    x = torch.randn(5, space.in_channels, resolution, resolution, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = static(x).numpy()
    got = (
        ort_logits(out, x.numpy())
        if dynamic
        else np.concatenate([ort_logits(out, x[i : i + 1].numpy()) for i in range(5)])
    )
    assert np.abs(got - expected).max() <= parity_tolerance(expected)
    assert (got.argmax(1) == expected.argmax(1)).all()
    # BN was recalibrated: the exported statistics are not the supernet's.
    assert r.bn_batches == 2
    assert not torch.equal(static.bn1.running_mean, net.bn1.running_mean)


def test_metadata_round_trip_and_files(net, data, ckpt, tmp_path):
    base = sample_arch(net.space, 11)  # extras as `ofa search` writes them
    arch = base.with_extra(
        {
            "predicted_top1": 71.5,
            "latency_ms": 3.25,
            "lut": "tables/x.yaml",
            "target_ms": 3.5,
            "macs": net.space.macs(base),
            "params": net.space.params(base),
        }
    )
    out = tmp_path / "deploy" / "model.onnx"
    r = export_subnet(
        net, arch, ExportConfig(out, calib_batches=2, batch_size=32, checkpoint=ckpt, latency=False), data=data
    )
    meta = read_metadata(out)
    assert meta["arch"] == arch and meta["arch"].extra["predicted_top1"] == 71.5
    assert meta["resolution"] == arch.resolution and meta["in_channels"] == 3
    assert meta["mean"] == [0.5] * 3 and meta["std"] == [0.25] * 3
    assert meta["class_names"] == data.class_names
    assert meta["supernet_sha256"] == file_sha256(ckpt) == r.supernet_sha256
    assert meta["predicted_top1"] == 71.5 and meta["predicted_latency_ms"] == 3.25
    assert meta["latency_table"] == "tables/x.yaml"
    assert meta["space_fingerprint"] == net.space.fingerprint()
    assert meta["macs"] == r.macs == net.space.macs(arch) and meta["params"] == r.params
    assert meta["top1_fp32"] == pytest.approx(r.top1_fp32)
    assert meta["parity_max_abs_diff"] <= r.parity.allowed

    # Accuracy is the ONNX model's on the test split.
    runner = OrtModel(out)
    x = torch.stack([data.test[i][0] for i in range(len(data.test))])
    y = torch.stack([data.test[i][1] for i in range(len(data.test))]).numpy()
    x = torch.nn.functional.interpolate(x, size=arch.resolution, mode="bilinear", antialias=True)
    assert r.top1_fp32 == pytest.approx(100 * (runner(x.numpy()).argmax(1) == y).mean())
    assert r.test_images == len(data.test)

    summary = json.loads(r.summary_path.read_text())
    assert summary["arch"] == arch.to_dict() and summary["parity"]["ok"] is True
    card = r.card_path.read_text()
    for needle in (
        arch.short(),
        f"{r.macs:,}",
        f"{r.params:,}",
        f"{r.top1_fp32:.2f}%",
        "71.50%",
        "3.250 ms",
        "target 3.5 ms",
        file_sha256(ckpt),
        "class0, class1",
    ):
        assert needle in card
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "model",
        "model.export.json",
        "model.md",
        "model.onnx",
        "model.pt",
    ]


def test_reloaded_subnet_matches_a_fresh_extraction(net, data, tmp_path):
    arch = sample_arch(net.space, 5)
    r = export_subnet(
        net, arch, ExportConfig(tmp_path / "m.onnx", calib_batches=3, batch_size=16, latency=False, seed=4), data=data
    )
    reloaded = load_subnet(r.subnet_path)
    assert reloaded.ofa_meta["arch"] == arch and reloaded.ofa_meta["class_names"] == data.class_names
    # The same extraction and recalibration (same seed, same batches) gives bitwise-equal outputs.
    fresh = net.extract(arch)
    recalibrate_bn(fresh, make_loader(data.train, 16, shuffle=True, seed=4), 3, resolution=arch.resolution)
    x = torch.randn(4, 3, arch.resolution, arch.resolution)
    with torch.no_grad():
        assert torch.equal(reloaded(x), fresh.eval()(x))


def test_parity_allows_rounding_that_grows_with_the_logits_not_an_offset():
    class Offset:  # a runtime whose logits are the reference's plus a fixed offset
        batch = None

        def __init__(self, model, offset):
            self.model, self.offset = model, offset

        def __call__(self, x, chunk):
            with torch.no_grad():
                return self.model(torch.from_numpy(x)).numpy() + self.offset

    real, noise = torch.randn(6, 4), torch.randn(2, 4)
    for scale, offset, ok in [(1.0, 5e-5, True), (1.0, 3e-4, False), (100.0, 3e-4, True), (100.0, 3e-3, False)]:
        model = torch.nn.Linear(4, 3)
        with torch.no_grad():
            model.weight.mul_(scale)  # logits of order `scale`
        parity = check_parity(model, Offset(model, offset), real, noise)
        assert parity.allowed == pytest.approx(parity_tolerance(model(torch.cat([real, noise])).detach().numpy()))
        assert parity.ok is ok, (scale, offset, parity)
    assert parity_tolerance(np.zeros((2, 3))) == 1e-4


def test_parity_failure_is_an_error_and_writes_nothing(net, ckpt, tmp_path, monkeypatch, capsys):
    import ofa.export.export

    arch = sample_arch(net.space, 2)
    arch_path = arch.save(tmp_path / "arch.json")
    out = tmp_path / "model.onnx"
    out.write_bytes(b"previous good model")
    real_to_onnx = ofa.export.export.to_onnx

    def corrupted(model, *args, **kwargs):  # an exporter bug: one logit off by 1e-3, ten times the tolerance
        model.classifier.bias.data[0] += 1e-3
        try:
            return real_to_onnx(model, *args, **kwargs)
        finally:
            model.classifier.bias.data[0] -= 1e-3

    monkeypatch.setattr(ofa.export.export, "to_onnx", corrupted)
    with pytest.raises(ParityError, match="onnxruntime does not match PyTorch"):
        export_subnet(net, arch, ExportConfig(out, latency=False))
    rc = main(["export", "--supernet", str(ckpt), "--arch", str(arch_path), "--out", str(out), "--no-latency"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("ofa export: error:") and "max |logit diff|" in err[-1]
    assert "Traceback" not in "\n".join(err)
    assert out.read_bytes() == b"previous good model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arch.json", "model.onnx"]


def test_cli_errors(net, ckpt, tmp_path, capsys):
    arch_path = sample_arch(net.space, 1).save(tmp_path / "arch.json")
    other = OFAMobileNetV3(tiny_space(stages=tiny_space().stages[:2])).save(tmp_path / "other.pt")
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(ckpt.read_bytes()[:3000])
    bad_arch = tmp_path / "bad.json"
    bad_arch.write_text(json.dumps({**sample_arch(net.space, 1).to_dict(), "resolution": 24}))
    wider = tiny_space(final_expand_width=96)  # same arch shape, other widths
    foreign = wider.stamp(sample_arch(wider, 1))  # the arch JSON names the space it was searched in
    foreign_arch = foreign.save(tmp_path / "foreign.json")
    out = str(tmp_path / "m.onnx")
    cases = {
        "the supernet itself is not exported": ["--supernet", str(ckpt), "--out", out],
        "this is a PyTorch checkpoint, not an arch JSON": ["--supernet", str(ckpt), "--arch", str(ckpt), "--out", out],
        "resolution: 24 is not one of": ["--supernet", str(ckpt), "--arch", str(bad_arch), "--out", out],
        "does not fit the supernet's space": ["--supernet", str(other), "--arch", str(arch_path), "--out", out],
        "searched for a checkpoint of another space": [
            "--supernet",
            str(ckpt),
            "--arch",
            str(foreign_arch),
            "--out",
            out,
        ],
        "corrupt.pt: not a readable supernet checkpoint": [
            "--supernet",
            str(corrupt),
            "--arch",
            str(arch_path),
            "--out",
            out,
        ],
        "opset 9 is not supported": ["--supernet", str(ckpt), "--arch", str(arch_path), "--out", out, "--opset", "9"],
        "must end with .onnx": [
            "--supernet",
            str(ckpt),
            "--arch",
            str(arch_path),
            "--out",
            str(tmp_path / "m.pt"),
            "--no-latency",
        ],
        "--int8 needs training images": ["--supernet", str(ckpt), "--arch", str(arch_path), "--out", out, "--int8"],
        "calib_batches / --calib-batches: must be >= 0, got -1": [
            *("--supernet", str(ckpt), "--arch", str(arch_path), "--out", out, "--calib-batches", "-1"),
        ],
        "int8 / --int8 needs calibration images: calib_batches / --calib-batches must be > 0": [
            *("--supernet", str(ckpt), "--arch", str(arch_path), "--out", out, "--int8", "--calib-batches", "0"),
        ],
        "missing.json: arch file not found": [
            "--supernet",
            str(ckpt),
            "--arch",
            str(tmp_path / "missing.json"),
            "--out",
            out,
        ],
    }
    for message, argv in cases.items():
        rc = main(["export", *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2, message
        assert err[-1].startswith("ofa export: error:") and message in err[-1], (message, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "arch.json",
        "bad.json",
        "corrupt.pt",
        "foreign.json",
        "other.pt",
    ]
    with pytest.raises(Exception, match="supernet itself is not exported"):
        export_subnet(net, None, ExportConfig(tmp_path / "x.onnx"))


def test_the_arch_is_checked_once_at_the_entry(net, ckpt, tmp_path, monkeypatch):
    """Extraction and the later steps trust the entry's check; the CLI adds none of its own."""
    from ofa.families.mbv3.space import SearchSpace

    checked = []
    real_validate = SearchSpace.validate

    def counting(self, arch, source="arch"):
        checked.append(arch)
        return real_validate(self, arch, source)

    monkeypatch.setattr(SearchSpace, "validate", counting)
    arch = sample_arch(net.space, 4)
    assert arch != net.space.max_arch(arch.resolution)  # a new supernet activates its largest subnet
    export_subnet(net, arch, ExportConfig(tmp_path / "a.onnx", calib_batches=0, latency=False))
    assert checked.count(arch) == 1
    checked.clear()
    arch_path = arch.save(tmp_path / "arch.json")
    argv = ["--supernet", str(ckpt), "--arch", str(arch_path), "--out", str(tmp_path / "b.onnx"), "--no-latency"]
    assert main(["export", *argv]) == 0
    assert checked.count(arch) == 1


INTERLEAVED = {"warmup": 2, "rounds": 5, "calls": 2, "trim": 0.0}  # an older table's protocol


def test_latency_table_prediction_and_measurement(net, ckpt_with_data, tmp_path, capsys, monkeypatch):
    from search.latency import save_table

    known_call_ms(monkeypatch, 10.0)  # the calls run, the clocks read 10 ms: 15 blocks, each of 3 calls
    # a table whose protocol (interleaved rounds) the export does not repeat: it measures as a user would
    table = synthetic_table(net.space, batch=2, protocol=INTERLEAVED)
    arch = sample_arch(net.space, 9)
    r = export_subnet(net, arch, ExportConfig(tmp_path / "m.onnx"), table=table)
    assert r.predicted_latency_ms == pytest.approx(table.predict(arch))
    lat = r.latency_fp32
    assert lat.mean_ms == 10.0 and lat.batch == 2 and lat.threads == 1 and lat.samples >= 15
    assert lat.source.startswith("standalone, wall clock, q25 of at least 15 blocks")  # as a user measures it
    assert lat.source.endswith(", ort-cpu")
    # A fixed-batch model takes the table's batch so it is timed exactly as the table was.
    assert onnx.load(r.onnx_path).graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2

    # The CLI finds the table through the arch JSON's `lut` field and prints both numbers; the
    # checkpoint's meta names its data, so BN is recalibrated and test accuracy measured.
    table_path = save_table(tmp_path / "tables" / "dev.yaml", table.meta, table.entries)
    arch_path = arch.with_extra({"lut": "tables/dev.yaml"}).save(tmp_path / "arch.json")
    rc = main(
        [
            "export",
            "--supernet",
            str(ckpt_with_data),
            "--arch",
            str(arch_path),
            "--out",
            str(tmp_path / "c.onnx"),
            "--calib-batches",
            "2",
            "--int8",
            "--dynamic-batch",
        ]
    )
    printed = capsys.readouterr()
    out = printed.out
    assert rc == 0, out
    # an arch file without a space fingerprint is accepted, with one note line
    assert [line for line in printed.err.splitlines() if "names no space fingerprint" in line] == [
        f"note: {arch_path}: names no space fingerprint (a hand-written or converted arch?); checked against the "
        "supernet's space by its values only"
    ]
    assert "BN recalibration: 2 training batches" in out and "64 test images + 16 random inputs" in out
    assert "top-1 on 96 test images: fp32" in out and "int8" in out
    assert (
        "latency (standalone, wall clock, q25 of at least 15 blocks of >= 20 ms, 95% interval within ±2% or 1 s "
        "per model, spanning >= 1 s (several models timed together: ratios to a reference model's q10), ort-cpu, "
        "batch 2, 1 thread(s)): fp32" in out  # fp32 and int8 timed as one set
    )
    assert "table predicts" in out
    meta = read_metadata(tmp_path / "c.onnx")
    assert meta["latency_table"] == str(table_path)
    assert meta["predicted_latency_ms"] == pytest.approx(table.predict(arch))
    assert read_metadata(tmp_path / "c.int8.onnx")["precision"].startswith("int8")

    # A table of the torch backend times the static PyTorch model (what it predicts), the ONNX file beside it.
    torch_table = synthetic_table(net.space, backend="torch-cpu", protocol=INTERLEAVED)
    r = export_subnet(net, arch, ExportConfig(tmp_path / "t.onnx"), table=torch_table)
    assert r.latency_fp32.source.endswith("q10), torch-cpu") and r.latency_fp32.mean_ms == pytest.approx(10.0)
    assert r.extra["latency"]["fp32 (onnx)"]["source"].endswith("q10), ort-cpu")

    other = synthetic_table(tiny_space(num_classes=7), protocol=INTERLEAVED)
    with pytest.raises(Exception, match="table was measured for space"):
        export_subnet(net, arch, ExportConfig(tmp_path / "x.onnx"), table=other)


def test_int8_within_two_points_of_fp32_after_brief_digits_training(tmp_path, capsys):
    from ofa.train import load_recipe, train

    recipe = load_recipe(
        Path(__file__).parents[1] / "recipes" / "digits.yaml",
        [
            "phases=[{name: brief, epochs: 1, lr: 0.1}]",
            "data.batch_size=16",
            "data.augment=none",
            "schedule.micro_batches=1",
            "distill.teacher=none",
            "noise_scale.enabled=false",
            "eval.subnets=minmax",
            "eval.calib_batches=2",
            "optimizer.label_smoothing=0",
        ],
    )
    ckpt = train(recipe, tmp_path / "run")
    arch = sample_arch(recipe.space, 3, resolutions=[16])
    assert arch != recipe.space.max_arch()
    arch_path = arch.save(tmp_path / "arch.json")
    out = tmp_path / "export" / "digits.onnx"
    rc = main(
        [
            "export",
            "--supernet",
            str(ckpt),
            "--arch",
            str(arch_path),
            "--out",
            str(out),
            "--int8",
            "--calib-batches",
            "5",
            "--no-latency",
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0, printed
    summary = json.loads(out.with_suffix(".export.json").read_text())
    fp32, int8 = summary["top1_fp32"], summary["top1_int8"]
    assert summary["test_images"] == 360  # the digits recipe's stratified 20% test split
    assert fp32 > 30, "the briefly trained subnet should be far above chance (10%)"
    assert abs(int8 - fp32) <= 2.0, (fp32, int8)
    assert f"fp32 {fp32:.2f}%, int8 {int8:.2f}%" in printed
    int8_model = onnx.load(out.with_suffix(".int8.onnx"))
    onnx.checker.check_model(int8_model, full_check=True)
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in int8_model.graph.node}
    meta = read_metadata(int8_model)
    assert meta["class_names"] == [str(i) for i in range(10)] and len(meta["mean"]) == 1
    assert meta["int8_calibration_images"] == 5 * 64
