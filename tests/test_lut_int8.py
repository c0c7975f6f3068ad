"""INT8 latency tables on onnxruntime: every timed model quantized as it ships, float fallbacks listed, checked
in INT8, packed in INT8, and one line for each bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import onnx
import onnxruntime as ort
import pytest
import yaml
from helpers import FAST

from ofa.cli import main
from ofa.lut.build import TableBuildConfig, build_table
from ofa.lut.check import CheckConfig, check_table
from ofa.lut.pack import ImportConfig, PackConfig, import_timings, pack_models, read_manifest
from ofa.runtime import runtimes
from ofa.utils.errors import OFAError
from search.latency import LatencyTable, space_from_arg

DIGITS = Path(__file__).resolve().parents[1] / "recipes" / "digits.yaml"
QDQ = {"QuantizeLinear", "DequantizeLinear"}


def digits_cut(**overrides):
    """The digits space at one resolution with one kernel and expand, and two of its stages (squeeze-excite with
    relu, then hswish): 8 layer models, 9 subnets, each quick to quantize."""
    space = space_from_arg(str(DIGITS))
    cut = {"stages": space.stages[1:3], "kernels": (3,), "expands": (2,), "resolutions": (12,)}
    return replace(space, **{**cut, **overrides})


def run(argv: list[str]) -> int | str | None:
    """``ofa ARGV``'s exit status, argparse's own refusals included."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def ops(model: bytes) -> set[str]:
    return {n.op_type for n in onnx.load_from_string(model).graph.node}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> SimpleNamespace:
    """An INT8 table of the cut digits space, with every ONNX model its build handed onnxruntime."""
    out = tmp_path_factory.mktemp("int8") / "int8.yaml"
    loaded: list[tuple[tuple[int, ...], bytes]] = []

    class Recording(runtimes.OrtRunner):
        def __init__(self, model, input_shape, threads=1, device="cpu"):
            loaded.append((tuple(input_shape), model))
            super().__init__(model, input_shape, threads, device)

    cfg = TableBuildConfig(out, dtype="int8", calibrate=2, protocol=FAST, max_noise_pct=1e6, progress=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtimes, "OrtRunner", Recording)
        table = build_table(digits_cut(), cfg)
    return SimpleNamespace(table=table, out=out, loaded=loaded)


def test_int8_build_quantizes_every_timed_model_but_the_empty_one(built):
    table, loaded = built.table, built.loaded
    assert table.dtype == "int8" and table.meta["dtype"] == "int8" and table.describe().endswith("/ int8")
    assert table.meta["int8"]["scheme"].startswith("QDQ") and "synthetic" in table.meta["int8"]["calibration"]
    empty = [model for shape, model in loaded if shape == (1, 1)]
    assert len(empty) == 1 and not ops(empty[0]) & QDQ  # the per-call overhead stays an Identity
    timed = [(shape, model) for shape, model in loaded if shape != (1, 1)]
    assert len(timed) == len(table.entries) + 2 + 3  # layers, calibration subnets, probes
    assert all(ops(model) >= QDQ for _, model in timed)
    subnets = [model for shape, model in timed if shape == (1, 1, 12, 12) and "Gemm" in ops(model)]
    assert len(subnets) == 5 and len(table.meta["correction"]["per_resolution"][12]["points"]) == 2
    # onnxruntime fuses the Q/DQ pairs into integer kernels: the layers run in INT8
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(built.out.with_name("optimized.onnx"))
    layer = next(model for shape, model in timed if shape[1] > 1)
    ort.InferenceSession(layer, opts, providers=["CPUExecutionProvider"])
    assert "QLinearConv" in {n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node}


def test_int8_build_lists_the_ops_left_in_float(built):
    float_ops = built.table.meta["int8"]["float_ops"][12]
    # the digits space's hswish (HardSigmoid) and squeeze-excite (ReduceMean) have no integer kernel here
    assert float_ops and all(isinstance(n, int) and 1 <= n <= len(built.loaded) for n in float_ops.values())
    assert not set(float_ops) & {"QLinearConv", "QuantizeLinear", "DequantizeLinear"}
    assert yaml.safe_load(built.out.read_text())["meta"]["int8"]["float_ops"] == {12: float_ops}


def test_check_judges_int8_subnets(built, tmp_path, monkeypatch, capsys):
    dtypes = []
    real = runtimes.make_runner

    def spy(*args, **kwargs):
        dtypes.append(kwargs.get("dtype"))
        return real(*args, **kwargs)

    monkeypatch.setattr("ofa.lut.layer_models.make_runner", spy)
    argv = ["lut", "check", str(built.out), "--n", "1", "--repeats", "2", "--max-noise", "1e6", "--quiet", "--json"]
    assert main([*argv, "--dtype", "int8", "--out", str(tmp_path / "check")]) == 0  # agreeing with the table
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["dtype"] == "int8" and summary["n"] == 1
    # the paired reference, the subnet, the probes, the retest: every one quantized whole
    assert len(dtypes) == 1 + 1 + 3 + 1 and set(dtypes) == {"int8"}
    assert main([*argv, "--dtype", "float32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dtype float32" in err[0] and "measured in int8" in err[0]
    with pytest.raises(OFAError, match="measured in int8"):
        check_table(built.table, CheckConfig(dtype="float32"))


def test_resume_keeps_the_dtype(built, tmp_path):
    cfg = TableBuildConfig(built.out, calibrate=2, protocol=FAST, max_noise_pct=1e6, progress=False)
    with pytest.raises(OFAError, match=r"exists with dtype='int8', this build asks 'float32'"):
        build_table(digits_cut(), cfg)
    # a table from before INT8 names no dtype: it reads, and resumes, as float32
    doc = yaml.safe_load(built.out.read_text())
    del doc["meta"]["dtype"], doc["meta"]["int8"]
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(doc))
    assert LatencyTable.load(old).dtype == "float32"
    assert build_table(digits_cut(), replace(cfg, out=old)).dtype == "float32"  # complete: nothing timed
    asks = r"exists with dtype='float32', this build asks 'int8' \(dtype / --dtype\); delete it"
    with pytest.raises(OFAError, match=asks):
        build_table(digits_cut(), replace(cfg, out=old, dtype="int8"))


def test_int8_pack_quantizes_its_models_and_imports_as_int8(tmp_path):
    folder = tmp_path / "pack"
    pack_models(digits_cut(depths=(1,)), PackConfig(folder, "onnx", dtype="int8", calibrate=0, progress=False))
    manifest = read_manifest(folder)
    assert manifest["dtype"] == "int8" and manifest["int8"]["scheme"].startswith("QDQ")
    for key, m in manifest["models"].items():
        assert bool(ops((folder / m["file"]).read_bytes()) >= QDQ) == (key != "<empty>")
    timings = {key: {"mean_ms": 1.0, "std_ms": 0.0, "count": 1} for key in manifest["models"]}
    table = import_timings(folder, timings, ImportConfig(tmp_path / "t.yaml"))
    assert table.dtype == "int8" and table.meta["int8"]["float_ops"] is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["lut", "build", "--space", "mbv3", "--dtype", "fp16"], "invalid choice: 'fp16'"),
        (["lut", "build", "--space", "mbv3", "--dtype", "int8", "--backend", "torch-cpu"], "no INT8 path"),
        (["lut", "check", str(DIGITS), "--dtype", "bf16"], "invalid choice: 'bf16'"),
    ],
)
def test_bad_dtype_input_is_one_line(argv, says, tmp_path, capsys):
    rc = run([*argv, "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0] and "--dtype" in err[0], err
    assert not (tmp_path / "t").exists()


def test_library_names_the_field_and_flag():
    with pytest.raises(OFAError, match=r"^dtype / --dtype: unknown dtype 'fp16'"):
        TableBuildConfig(Path("t.yaml"), dtype="fp16")
    with pytest.raises(OFAError, match=r"^dtype / --dtype: backend 'torch-cpu' has no INT8 path here"):
        TableBuildConfig(Path("t.yaml"), dtype="int8", backend="torch-cpu")
    with pytest.raises(OFAError, match=r"^dtype: backend 'torch-cpu' has no INT8 path here"):
        runtimes.make_runner("torch-cpu", None, (1, 1), 1, dtype="int8")
    with pytest.raises(OFAError, match=r"^format 'onnx' has no fp16 path here"):
        runtimes.formats.convert("onnx", None, (1, 1), dtype="fp16")
