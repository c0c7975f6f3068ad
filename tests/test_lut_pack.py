"""Tables for devices without Python: pack, import a recorded timing file, and build through a runner command."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml
from helpers import tiny_space

from ofa.cli import main
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.encoding import sample_arch
from ofa.lut.build import fit_correction
from ofa.lut.external_runner import CommandRunner
from ofa.lut.layer_models import layer_specs
from ofa.lut.pack import ImportConfig, PackConfig, import_timings_file, pack_models, read_manifest
from ofa.lut.runner import RunnerBuildConfig, build_with_runner
from ofa.utils.errors import OFAError
from search.latency import LatencyTable

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RECORDED = FIXTURES / "pack_timings_tiny.csv"  # timed on the development machine with time_onnx.py
TIMER = f"{sys.executable} {FIXTURES / 'time_onnx.py'} {{model}} {{shape}} 20"
QUICK = "sh -c 'echo median: 0.25 ms' {model}"  # a timer as quick as a shell's echo, for builds that only re-time


def pack_space():
    """The space the recorded timings were taken for (keys are layer configs and seeded calibration subnets)."""
    return tiny_space(kernels=(3, 5), expands=(2, 3), depths=(1, 2), resolutions=(12, 16))


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pack") / "onnx"
    pack_models(pack_space(), PackConfig(out, "ort-cpu", calibrate=3, progress=False))
    return out


def recorded() -> dict[str, float]:
    with RECORDED.open() as fh:
        return {row["key"]: float(row["median_ms"]) for row in csv.DictReader(fh)}


def test_pack_holds_every_model_a_table_needs(pack):
    manifest = read_manifest(pack)
    models = manifest["models"]
    space = pack_space()
    layers = {s.key for r in space.resolutions for s in layer_specs(space, r)}
    assert {k for k, m in models.items() if m["kind"] == "layer"} == layers
    assert sum(m["kind"] == "calibration" for m in models.values()) == 3 * 2
    assert sum(m["kind"] == "probe" for m in models.values()) == 3 * 2
    assert models["<empty>"]["input_shape"] == [1, 1]
    assert manifest["model_format"] == "onnx" and manifest["space_fingerprint"] == space.fingerprint()
    assert (pack / "README.md").read_text().count("onnxruntime_perf_test") >= 1
    for key in ("<empty>", next(k for k in models if k.startswith("stem")), next(k for k in models if "calib" in k)):
        entry = models[key]
        session = ort.InferenceSession(str(pack / entry["file"]), providers=["CPUExecutionProvider"])
        x = np.zeros(entry["input_shape"], np.float32)
        assert session.run(None, {session.get_inputs()[0].name: x})[0].shape[0] == 1


def test_import_round_trips_a_recorded_timing_file(pack, tmp_path, capsys):
    out = tmp_path / "table.yaml"
    assert main(["lut", "import", str(pack), "--timings", str(RECORDED), "--out", str(out), "--device", "dev"]) == 0
    assert "wrote" in capsys.readouterr().out
    table, ms = LatencyTable.load(out), recorded()
    overhead = ms["<empty>"]
    assert table.overhead_ms == pytest.approx(overhead)
    assert {k: e["mean_ms"] for k, e in table.entries.items()} == pytest.approx(
        {k: max(0.0, v - overhead) for k, v in ms.items() if not k.startswith("<")}, abs=1e-6
    )
    manifest = read_manifest(pack)["models"]
    for r in (12, 16):  # the same correction a build fits: calibration subnets' raw sums vs their timings
        keys = [k for k, m in manifest.items() if m["kind"] == "calibration" and m["resolution"] == r]
        archs = [a for a in table.calibration_archs() if a.resolution == r]
        raw = [table.predict_raw(a) for a in archs]
        assert table.correction(r) == pytest.approx(fit_correction(raw, [ms[k] for k in keys]), abs=1e-5)
        assert len(table.probes(r)) == 3
    arch = sample_arch(pack_space(), 1, resolutions=[16])
    scale, offset = table.correction(16)
    assert table.predict(arch) == pytest.approx(scale * table.predict_raw(arch) + offset)
    assert table.meta["device"] == "dev" and "pack_timings_tiny.csv" in table.meta["protocol"]["timer"]


def test_import_names_missing_and_unknown_keys(pack, tmp_path, capsys):
    rows = RECORDED.read_text().splitlines()
    cases = {
        "missing": (
            "\n".join(r for r in rows if not r.startswith("<empty>")),
            "no timing for 1 key(s) of the pack: <empty>",
        ),
        "unknown": ("\n".join([*rows, "conv:bogus,1.0"]), "1 key(s) not in the pack's manifest: conv:bogus"),
        "header": (
            "\n".join(["key,ms", *rows[1:]]),
            "header must be key,median_ms (optional samples, std_ms); missing median_ms",
        ),
        "twice": ("\n".join([*rows, rows[1]]), "appears twice"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / f"{name}.csv"
        path.write_text(text + "\n")
        rc = main(["lut", "import", str(pack), "--timings", str(path), "--out", str(tmp_path / "t.yaml")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and message in err[0], (name, err)
    assert not (tmp_path / "t.yaml").exists()
    with pytest.raises(OFAError, match="not a folder written by `ofa lut pack`"):
        import_timings_file(tmp_path, RECORDED, ImportConfig(tmp_path / "t.yaml"))
    with pytest.raises(OFAError, match="exists and is not an empty folder"):
        pack_models(pack_space(), PackConfig(pack, "onnx", progress=False))
    with pytest.raises(OFAError, match="--backend: unknown format 'tflite'"):
        PackConfig(tmp_path / "p", "tflite")


def test_runner_build_times_each_packed_model_with_a_command(tmp_path, monkeypatch):
    space = tiny_space(stages=tiny_space().stages[1:], kernels=(3,), expands=(2,), depths=(1, 2, 3), resolutions=(12,))
    out, folder = tmp_path / "table.yaml", tmp_path / "pack"  # 8 layers, 9 subnets: 14 models, a command each
    runner = CommandRunner(TIMER, r"median: (?P<ms>[\d.]+) ms")
    cfg = RunnerBuildConfig(out, runner, PackConfig(folder, "onnx", calibrate=2, progress=False), blocks=1)
    table = build_with_runner(space, cfg)
    models = read_manifest(folder)["models"]
    assert len(table.entries) == sum(m["kind"] == "layer" for m in models.values())
    assert table.overhead_ms > 0 and all(e["count"] == 1 for e in table.entries.values())
    assert "time_onnx.py" in table.meta["protocol"]["timer"]
    # the figures are kept as the pack's timings.csv, which `ofa lut import` turns into the same table
    again = import_timings_file(folder, folder / "timings.csv", ImportConfig(tmp_path / "again.yaml"))
    assert again.entries == table.entries and again.meta["correction"] == table.meta["correction"]
    # checked through the same command, on subnets it never timed
    check = tmp_path / "check"
    rc = main(
        [
            "lut",
            "check",
            str(out),
            "--runner",
            TIMER,
            "--runner-regex",
            r"median: (?P<ms>[\d.]+) ms",
            "--n",
            "2",
            "--repeats",
            "1",
            "--out",
            str(check),
            "--quiet",
        ]
    )
    summary = json.loads((check / "summary.json").read_text())
    assert rc == 0 and summary["n"] == 2 and len(summary["rows"]) == 2 and len(list((check / "models").iterdir())) == 2
    assert all(r["predicted_ms"] == round(table.predict(Arch.from_dict(r["arch"])), 4) for r in summary["rows"])
    # a second build reuses the pack and only re-times
    import ofa.lut.runner

    monkeypatch.setattr(ofa.lut.runner, "pack_models", lambda *a: pytest.fail("packed again"))
    rc = main(
        [
            "lut",
            "build",
            "--space",
            str(out),
            "--out",
            str(tmp_path / "cli.yaml"),
            "--pack",
            str(folder),
            "--calibrate",
            "2",
            "--repeats",
            "1",
            "--runner",
            QUICK,  # re-timed by a quick command: the pack, not the timer, is the point
            "--runner-regex",
            r"median: (?P<ms>[\d.]+) ms",
            "--quiet",
        ]
    )
    assert rc == 0 and set(LatencyTable.load(tmp_path / "cli.yaml").entries) == set(table.entries)


def test_runner_build_of_some_resolutions_packs_and_times_only_those(tmp_path):
    space = tiny_space(kernels=(3,), expands=(2,), depths=(1,), resolutions=(12, 16))
    folder = tmp_path / "pack"
    pack = PackConfig(folder, "onnx", resolutions=(16,), calibrate=2, progress=False)
    timed = tmp_path / "timed.txt"  # a command as quick as a shell's echo, which logs each model it is given
    runner = CommandRunner(f"sh -c 'echo \"$0\" >> {timed}; echo median: 0.25 ms' {{model}}", r"median: ([\d.]+) ms")
    cfg = RunnerBuildConfig(tmp_path / "t.yaml", runner, pack, blocks=1)
    table = build_with_runner(space, cfg)
    assert tuple(table.resolutions) == (16,) and not any("in=12x12" in key for key in table.entries)
    packed = {str(folder / m["file"]) for m in read_manifest(folder)["models"].values()}
    assert sorted(timed.read_text().split()) == sorted(packed)  # each model of the pack timed, once
    assert build_with_runner(space, cfg).entries.keys() == table.entries.keys()  # the pack is reused


def test_benchmark_app_output_is_read_precisely():
    text = (FIXTURES / "benchmark_app_output.txt").read_text()  # recorded: benchmark_app -api sync -niter 200
    median = CommandRunner("benchmark_app -m {model}", r"Median:\s+(?P<value>[\d.]+) (?P<unit>ms|us)")
    assert median.parse(text) == pytest.approx(9.85e-3)
    fps = CommandRunner("benchmark_app -m {model}", r"Throughput:\s+(?P<fps>[\d.]+) FPS")
    assert fps.parse(text) == pytest.approx(1000 / 11592.82)
    total = CommandRunner(
        "executor_runner --model_path {model}", r"executed successfully (?P<calls>\d+) time\(s\) in (?P<ms>[\d.]+) ms"
    )
    line = "I 00:00:01.2 executor_runner.cpp:180] Model executed successfully 200 time(s) in 51.300000 ms."
    assert total.parse(line) == pytest.approx(51.3 / 200)  # the format ExecuTorch's executor_runner logs


def test_benchmark_app_times_packed_openvino_models(tmp_path):
    pytest.importorskip("openvino")
    tool = shutil.which("benchmark_app") or str(Path(sys.executable).with_name("benchmark_app"))
    if not Path(tool).exists():
        pytest.skip("benchmark_app is not installed")
    space = tiny_space(kernels=(3,), expands=(2,), depths=(1,), resolutions=(12,))
    folder = tmp_path / "pack"
    pack_models(space, PackConfig(folder, "openvino", calibrate=0, progress=False))
    models = read_manifest(folder)["models"]
    runner = CommandRunner(
        f"{tool} -m {{model}} -d CPU -hint none -nstreams 1 -nthreads 1 -api sync -niter 50",
        r"Median:\s+(?P<value>[\d.]+) (?P<unit>ms|us)",
    )
    for key in ("<empty>", next(k for k in models if k.startswith("head"))):
        entry = models[key]
        assert runner.time_ms(folder / entry["file"], entry["file"], entry["input_shape"]) > 0
    assert yaml.safe_load((folder / "manifest.yaml").read_text())["backend"] == "openvino-cpu"


def test_runner_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(OFAError, match="must name the model as"):
        CommandRunner("echo 1", "(.*)")
    with pytest.raises(OFAError, match="not a regular expression"):
        CommandRunner("echo {model}", "(")
    with pytest.raises(OFAError, match="needs a group"):
        CommandRunner("echo {model}", "ms")
    model = tmp_path / "m.onnx"
    with pytest.raises(OFAError, match=r"no match in the output for m\.onnx"):
        CommandRunner("echo {model}", r"median: ([\d.]+)").time_ms(model, "m.onnx", (1, 1))
    with pytest.raises(OFAError, match=r"exit status 3 on m\.onnx: boom"):
        CommandRunner(f"{sys.executable} -c 'import sys; print(\"boom\"); sys.exit(3)' {{model}}", "(.)").time_ms(
            model, "m.onnx", (1, 1)
        )
    rc = main(["lut", "build", "--space", "mbv3", "--out", str(tmp_path / "t.yaml"), "--runner", "echo {model}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--runner and --runner-regex go together" in err[0]
