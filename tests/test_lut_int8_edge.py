"""INT8 on the edge runtimes. OpenVINO: every timed model of a table but the empty one quantized by NNCF, the
layers the CPU plugin keeps in f32 listed, whole subnets judged in INT8, packs of NNCF-quantized IRs.
ExecuTorch: programs quantized by XNNPACK's quantizer, fully delegated, their float ops recorded in them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from torch import nn

pytest.importorskip("openvino")
pytest.importorskip("nncf")

from ofa.lut.build import TableBuildConfig, build_table
from ofa.lut.check import CheckConfig, check_table
from ofa.lut.pack import PackConfig, pack_models, read_manifest
from ofa.runtime import executorch_backend, formats, openvino_backend, runtimes
from tests.test_lut_int8 import FAST, digits_cut


def runtime_precisions(model) -> dict[str, set[str]]:
    """Layer type -> the precisions OpenVINO's CPU plugin runs it in, read from the compiled model."""
    compiled = openvino_backend._core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 1})
    out: dict[str, set[str]] = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        out.setdefault(info["layerType"].astype(str), set()).add(info["runtimePrecision"].astype(str))
    return out


def hswish_cut(**overrides):
    """The cut digits space's hswish stage alone (no squeeze-excite, a stride) with kernels 3 and 5: shallower
    subnets, each quicker for NNCF to quantize."""
    return digits_cut(**{"stages": digits_cut().stages[1:], "kernels": (3, 5), **overrides})


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> SimpleNamespace:
    """An OpenVINO INT8 table of the cut digits space (squeeze-excite included: where runtimes fall back to
    float), with every model its build had NNCF quantize."""
    out = tmp_path_factory.mktemp("ov-int8") / "int8.yaml"
    quantized: list[tuple[tuple[int, ...], object]] = []
    real = openvino_backend.quantize

    def recording(model, batches):
        q = real(model, batches)
        quantized.append((tuple(batches[0].shape), q))
        return q

    cfg = TableBuildConfig(
        out, backend="openvino-cpu", dtype="int8", calibrate=2, protocol=FAST, max_noise_pct=1e6, progress=False
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(openvino_backend, "quantize", recording)
        table = build_table(digits_cut(), cfg)
    return SimpleNamespace(table=table, out=out, quantized=quantized)


def test_openvino_int8_build_quantizes_every_timed_model_with_nncf(built):
    table, quantized = built.table, built.quantized
    assert table.dtype == "int8" and table.meta["backend"] == "openvino-cpu" and table.meta["runtime"] == "openvino"
    assert table.meta["int8"]["scheme"].startswith("NNCF") and "synthetic" in table.meta["int8"]["calibration"]
    assert len(quantized) == len(table.entries) + 2 + 3  # layers, calibration subnets, probes; not the empty model
    assert all(shape[0] == 1 and len(shape) == 4 for shape, _ in quantized)
    # the CPU plugin runs the quantized convolutions on integer inputs
    conv = next(model for shape, model in quantized if shape[1] > 1)
    assert runtime_precisions(conv)["Convolution"] & {"u8", "i8"}


def test_openvino_int8_build_lists_the_layers_left_in_f32(built):
    float_ops = built.table.meta["int8"]["float_ops"][12]
    assert float_ops and all(isinstance(n, int) and 1 <= n <= len(built.quantized) for n in float_ops.values())
    assert not set(float_ops) & openvino_backend.NOT_COMPUTE
    assert yaml.safe_load(built.out.read_text())["meta"]["int8"]["float_ops"] == {12: float_ops}


def test_openvino_check_judges_whole_int8_subnets(built, monkeypatch):
    quantized = []
    real = openvino_backend.quantize
    monkeypatch.setattr(openvino_backend, "quantize", lambda m, b: quantized.append(b[0].shape) or real(m, b))
    result = check_table(built.table, CheckConfig(n=1, repeats=2, dtype="int8", max_noise_pct=1e6, progress=False))
    assert result.summary["dtype"] == "int8" and result.summary["n"] == 1
    assert len(quantized) == 1 + 1 + 3 + 1  # the paired reference, the subnet, the drift probes, the retest: each whole


def test_openvino_int8_pack_writes_nncf_quantized_irs(tmp_path):
    folder = tmp_path / "pack"
    pack_models(
        hswish_cut(kernels=(3,), depths=(1,)), PackConfig(folder, "openvino", dtype="int8", calibrate=0, progress=False)
    )
    manifest = read_manifest(folder)
    assert manifest["dtype"] == "int8" and manifest["int8"] == formats.int8_record("openvino")
    for key, m in manifest["models"].items():
        assert ("FakeQuantize" in (folder / m["file"]).read_text()) == (key != "<empty>"), key


class ConvThenSine(nn.Module):
    """A convolution XNNPACK's quantizer takes, then an op it has no pattern for."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(torch.sin(torch.relu(self.conv(x))))


def test_executorch_int8_program_is_quantized_and_names_its_float_ops(monkeypatch):
    pytest.importorskip("executorch")
    torch.manual_seed(0)
    module, shape = ConvThenSine().eval(), (1, 3, 8, 8)
    # the runner's one conversion, looked at: the graph `quantize` returned and the program `formats.convert` made
    graphs, programs, quantize, convert = [], [], executorch_backend.quantize, formats.convert
    monkeypatch.setattr(executorch_backend, "quantize", lambda m, b: graphs.append(quantize(m, b)) or graphs[-1])
    monkeypatch.setattr(formats, "convert", lambda *a, **k: programs.append(convert(*a, **k)) or programs[-1])
    runner = runtimes.make_runner("executorch-xnnpack", module, shape, 1, dtype="int8")
    assert len(graphs) == len(programs) == 1 and isinstance(programs[0], bytes)
    quantized, pte = graphs[0], programs[0]
    targets = {str(n.target) for n in quantized.graph.nodes if n.op == "call_function"}
    assert any("quantize_per_tensor" in t for t in targets) and any("dequantize_per_channel" in t for t in targets)
    assert executorch_backend.float_ops(quantized) == ("sin",)  # the second sine: float in, float out

    assert runner.float_ops == ("sin",)  # read back from the program's own metadata
    assert executorch_backend.read_metadata(pte)[executorch_backend.FLOAT_OPS_KEY] == "sin"
    x = np.random.default_rng(1).standard_normal(shape, np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    got = executorch_backend.load_infer(pte, 1)(x)
    assert got.shape == want.shape and 0 < np.abs(got - want).max() < 0.1  # INT8: close, not bitwise


def test_executorch_quantizer_without_its_qat_patterns_quantizes_bit_for_bit_the_same():
    """`quantize` leaves out the conv+BN patterns (QAT's; BN is folded first) that cost most of its time."""
    pytest.importorskip("executorch")
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4))
    module[1].running_mean.uniform_(-1, 1)  # BN statistics that matter once folded
    module[4].running_var.uniform_(0.5, 2)
    module.eval()
    batches = [torch.from_numpy(np.random.default_rng(i).standard_normal((1, 3, 8, 8), np.float32)) for i in range(2)]
    ours = executorch_backend.quantize(module, [b.numpy() for b in batches])
    shipped = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    assert any(p.is_qat for p in shipped.SUPPORTED_PATTERNS)  # there is something to leave out
    with torch.no_grad():  # the quantizer as shipped: every pattern traced
        prepared = prepare_pt2e(torch.export.export(module, (batches[0],)).module(), shipped)
        for batch in batches:
            prepared(batch)
        theirs = convert_pt2e(prepared)

    def ops(graph: torch.fx.GraphModule) -> list[tuple]:  # each op with its constants (scales, zero points)
        calls = [n for n in graph.graph.nodes if n.op == "call_function" and "guards" not in n.name]
        return [(n.target, *(a for a in n.args if not isinstance(a, torch.fx.Node))) for n in calls]

    assert ops(ours) == ops(theirs) and sum("quantize_per_tensor" in str(op[0]) for op in ops(ours)) >= 2
    x = torch.from_numpy(np.random.default_rng(9).standard_normal((1, 3, 8, 8), np.float32))
    assert torch.equal(ours(x), theirs(x))
    assert all(torch.equal(v, theirs.state_dict()[k]) for k, v in ours.state_dict().items())
