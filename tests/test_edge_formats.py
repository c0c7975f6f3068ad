"""OpenVINO and ExecuTorch: backends for tables, and export formats checked on their own runtimes."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import NO_SPANS, known_call_ms, perturb, tiny_space
from test_export import fake_data

from ofa import OFAMobileNetV3
from ofa.cli import main
from ofa.export.export import ExportConfig, export_subnet
from ofa.export.verify import ParityError, parity_tolerance
from ofa.families.mbv3.encoding import sample_arch
from ofa.families.mbv3.space import StageSpec
from ofa.lut.build import TableBuildConfig, build_table
from ofa.lut.check import CheckConfig, check_table
from ofa.lut.layer_models import LayerModules, empty_runner, input_shape
from ofa.lut.protocols import time_models
from ofa.lut.timing import Standalone
from ofa.runtime import formats
from ofa.runtime.convert import read_metadata
from ofa.runtime.runtimes import OrtModel, check_backend, make_runner
from ofa.utils.errors import OFAError

pytest.importorskip("openvino")
pytest.importorskip("executorch")

EDGE = ("openvino-cpu", "executorch-xnnpack")


@pytest.fixture(scope="module")
def net() -> OFAMobileNetV3:
    return perturb(OFAMobileNetV3(tiny_space()), seed=5).eval()


@pytest.fixture(scope="module")
def small_net() -> OFAMobileNetV3:
    """One stage (squeeze-excite, hswish) of one block: the smallest subnet to lower to ExecuTorch, seconds each."""
    return perturb(OFAMobileNetV3(tiny_space(stages=(StageSpec(16, 2, True, "hswish"),), depths=(1,))), seed=6).eval()


def largest_block_arch(space, resolution: int):
    """The one block of ``small_net`` with its largest kernel and expand (not the min arch): ExecuTorch lowers its
    few ops in a fraction of a deeper subnet's time (a lowering's cost grows with the op count)."""
    arch = replace(space.min_arch(resolution), kernels=(7,), expands=(4,))
    space.validate(arch)
    return arch


@pytest.fixture(scope="module")
def exported(small_net, tmp_path_factory):
    """One export to MODEL.onnx with both formats, latency measured (briefly) on every runtime; of the one-block
    subnet (squeeze-excite, hswish, a stride), since each ExecuTorch lowering costs seconds per dozen ops."""
    out = tmp_path_factory.mktemp("edge") / "model.onnx"
    arch = largest_block_arch(small_net.space, 16)
    cfg = ExportConfig(out, calib_batches=2, batch_size=32, formats=("openvino", "executorch", "onnx"))
    with pytest.MonkeyPatch.context() as clock:
        known_call_ms(clock, 10.0)  # every latency the export measures: 10 ms a call, a block of 3 calls
        return export_subnet(small_net, arch, cfg, data=fake_data(small_net.space)), out


@pytest.mark.parametrize("backend", EDGE)
def test_edge_backends_time_a_layer_and_the_empty_model(net, backend, monkeypatch):
    known_call_ms(monkeypatch, 0.25)  # the runtime still runs each call; the clocks read 0.25 ms
    modules = LayerModules(net.space)
    key, (spec, module) = next(iter(modules.for_resolution(16).items()))
    runners = {key: make_runner(backend, module, input_shape(spec, 1), 1), "<empty>": empty_runner(backend, 1, 1)}
    stats = time_models(runners, Standalone(warmup=1, calls=5, blocks=3, block_ms=1.0, **NO_SPANS))
    assert all(s["mean_ms"] == pytest.approx(0.25) for s in stats.values())
    assert sorted(s["count"] for s in stats.values())[0] == 3  # 3 blocks, no time budget (the reference: one more)


def test_openvino_table_builds_with_overhead_and_correction_and_checks(tmp_path):
    # one stage (no squeeze-excite, hswish, a stride): 8 layer models, as few as 3 stages of one kernel and expand
    # give, and 14 shallow subnets (7 needed: 2 calibration, 3 probes, 2 checked)
    stage = StageSpec(32, 2, False, "hswish")
    space = tiny_space(stages=(stage,), kernels=(3, 5), expands=(2,), depths=(1, 2, 3), resolutions=(12,))
    cfg = TableBuildConfig(
        tmp_path / "ov.yaml",
        backend="openvino-cpu",
        calibrate=2,
        max_noise_pct=1000,
        protocol=Standalone(warmup=1, calls=5, blocks=3, block_ms=1.0, **NO_SPANS),
        progress=False,
    )
    table = build_table(space, cfg)
    assert table.meta["runtime"] == "openvino" and table.meta["complete"] and table.overhead_ms > 0
    assert len(table.meta["correction"]["per_resolution"][12]["points"]) == 2 and len(table.probes(12)) == 3
    result = check_table(table, CheckConfig(n=2, repeats=2, max_noise_pct=1000, progress=False))
    assert len(result.rows) == 2 and all(r["measured_ms"] > 0 for r in result.rows)


def test_export_writes_each_format_beside_onnx_and_in_the_folder(exported):
    r, out = exported
    assert [f.format for f in r.formats] == ["openvino", "executorch"]
    folder = out.with_suffix("")
    ov, et = r.formats
    assert ov.files == [
        str(folder / "model.xml"),
        str(folder / "model.bin"),
        str(out.with_suffix(".xml")),
        str(out.with_suffix(".bin")),
    ]
    assert et.files == [str(folder / "model.pte"), str(out.with_suffix(".pte"))]
    for f in r.formats:
        assert all(Path(p).is_file() for p in f.files)
        assert f.parity.ok and f.parity.max_abs_diff <= f.parity.allowed and f.parity.real_inputs == 64
        assert f.top1 == r.top1_fp32  # the very predictions of the ONNX model, image for image
        assert f.latency is not None and f.latency.mean_ms == 10.0
        assert formats.FORMAT_BACKEND[f.format] in f.latency.source
    # the same metadata as the ONNX file, read back from each file
    onnx_props = {p.key: p.value for p in onnx.load(out).metadata_props}
    assert formats.read_metadata("openvino", out.with_suffix(".xml")) == onnx_props
    assert formats.read_metadata("executorch", folder / "model.pte") == onnx_props
    assert read_metadata(out)["arch"] == r.arch
    summary = json.loads(out.with_suffix(".export.json").read_text())
    assert [f["format"] for f in summary["formats"]] == ["openvino", "executorch"]


@pytest.mark.parametrize("fmt", ["openvino", "executorch"])
def test_written_files_run_on_their_runtime_like_onnx(exported, fmt):
    _, out = exported
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = OrtModel(out)(x)
    got = formats.load_infer(fmt, out.with_suffix(formats.SUFFIX[fmt]), 1)(x)
    assert np.abs(got - want).max() <= parity_tolerance(want)


@pytest.mark.parametrize("fmt", ["openvino", "executorch"])
def test_one_corrupted_output_fails_the_export_and_writes_nothing(small_net, tmp_path, monkeypatch, fmt):
    real_load = formats.load_infer

    def corrupted(name, model, threads):  # a runtime bug: one logit off by 1e-3, ten times the tolerance
        infer = real_load(name, model, threads)
        if name != fmt:
            return infer

        def off(x):
            y = np.array(infer(x))
            y[:, 0] += 1e-3
            return y

        return off

    monkeypatch.setattr(formats, "load_infer", corrupted)
    arch = sample_arch(small_net.space, 4, resolutions=[12])
    with pytest.raises(ParityError, match=f"\\({fmt}\\) does not match PyTorch.*nothing written"):
        cfg = ExportConfig(tmp_path / "m.onnx", calib_batches=0, latency=False, formats=(fmt,))
        export_subnet(small_net, arch, cfg)
    assert list(tmp_path.iterdir()) == []


def test_missing_runtime_is_one_line_naming_the_extra(net, monkeypatch, tmp_path, capsys):
    ckpt, arch = net.save(tmp_path / "s.pt"), sample_arch(net.space, 1).save(tmp_path / "arch.json")
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino now raises ImportError
    rc = main(
        [
            "export",
            "--supernet",
            str(ckpt),
            "--arch",
            str(arch),
            "--out",
            str(tmp_path / "m.onnx"),
            "--format",
            "openvino",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == f"ofa export: error: {formats.openvino_backend.MISSING}"
    assert not (tmp_path / "m.onnx").exists()
    with pytest.raises(OFAError, match=r"ofa-toolkit\[openvino\]"):
        check_backend("openvino-cpu")
    with pytest.raises(OFAError, match=r"formats / --format: unknown format 'tflite'"):
        ExportConfig(tmp_path / "m.onnx", formats=("tflite",))
    rc = main(["lut", "build", "--space", "mbv3", "--out", str(tmp_path / "t.yaml"), "--backend", "openvino-cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "pip install 'ofa-toolkit[openvino]'" in err[0]
