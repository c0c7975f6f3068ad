"""Do latency predictions match what a user measures? Predictions vs a plain standalone wall-clock loop.

The loop is written here on its own, apart from the project's timing code (``ofa.lut.timing``): one
onnxruntime session with the settings tables are built with (1 intra-op thread, sequential, all graph
optimizations), ``time.perf_counter`` around ``session.run``; 30 warm-up calls, then ``--repeats`` (5)
repeats of 100 timed calls, each repeat's median, and the least of those medians: the rule of Python's
``timeit`` (its ``repeat`` and best of 5), since other processes only ever slow a repeat down. A group's
models take their repeats in turn (repeat 1 of every model, then repeat 2, ...), so one model's repeats
lie seconds apart, not inside one burst of host load. One model timed at a time, as a user benchmarks
a model. Two groups:

- demo: the models a pipeline run exported (default ``runs/digits/export``, else the ``pipeline_demo``
  bench's folder: every ``NAME.export.json`` there, else every model folder's) against the latency their
  search predicted; skipped with one line when there are none;
- subnets: random subnets of a table's space (default the shipped mbv3 table, ``--n`` per resolution,
  8 at 160 and 8 at 224 px) with random weights, against that table (built on this machine), each timed
  on the table's runtime: onnxruntime as above; OpenVINO's CPU plugin (an infer request, 1 inference
  thread, 1 stream, the latency hint); ExecuTorch's runtime on the XNNPACK program the project lowers
  (1 thread). An INT8 table's subnets are quantized as its models were (``ofa.runtime.formats.convert``, on
  synthetic batches) and run by the same loop. ``--exports none`` skips the demo group.

Every subnet is timed twice by the plain loop, the second pass after all the first ones (a minute later):
the share of subnets whose two plain-loop figures agree within ±10% (``retest_within_10pct``) is how far
the plain loop itself can be trusted on this host, the ceiling for any prediction judged against it.

One line per model, then (``--json``) a JSON object: the share within ±10% per group, MAPE, the plain
loop's test-retest, and whether the table was measured on this CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.common import ROOT
from ofa.families.registry import family_of
from ofa.runtime import formats
from ofa.utils.machine import cpu_name
from search.latency import LatencyTable

DEMO_EXPORTS = (ROOT / "runs" / "digits" / "export", ROOT / "runs" / "bench" / "pipeline_demo" / "export")


@dataclass(frozen=True)
class Loop:
    """The plain loop's settings: untimed calls, then ``repeats`` repeats of ``calls`` timed calls."""

    warmup: int = 30
    calls: int = 100
    repeats: int = 5

    def figures(self, models: list[Callable[[], object]]) -> list[float]:
        return best_of_repeats(models, self.warmup, self.calls, self.repeats)

    def describe(self) -> str:
        return (
            f"{self.warmup} warm-up calls, then the least median of {self.repeats} repeats of {self.calls} timed "
            "calls (the models taking repeats in turn), perf_counter"
        )


def plain_session(model: str | bytes) -> ort.InferenceSession:
    """A CPU session as a user would open it for a 1-thread benchmark."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def timed_median(call: Callable[[], object], calls: int) -> float:
    """Median milliseconds of ``calls`` timed calls of ``call()``."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def best_of_repeats(models: list[Callable[[], object]], warmup: int, calls: int, repeats: int) -> list[float]:
    """Each model's least median over ``repeats`` repeats of ``calls`` calls, the models taking repeats in turn."""
    for call in models:
        for _ in range(warmup):
            call()
    medians = [[timed_median(call, calls) for call in models] for _ in range(repeats)]
    return [min(figures) for figures in zip(*medians, strict=True)]


def random_feed(session: ort.InferenceSession) -> dict[str, np.ndarray]:
    """A batch-1 random input of the model's shape (a symbolic batch dimension becomes 1)."""
    spec = session.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in spec.shape]
    return {spec.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def onnxruntime_call(model: str | bytes) -> Callable[[], object]:
    """One ``session.run`` on a random batch-1 input, in the plain session."""
    session = plain_session(model)
    feed = random_feed(session)
    return lambda: session.run(None, feed)


def openvino_call(model, shape: tuple[int, ...]) -> Callable[[], object]:
    """An OpenVINO CPU infer request on the ``openvino.Model``, 1 inference thread, 1 stream, as benchmark_app
    -nthreads 1."""
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
    request = ov.Core().compile_model(model, "CPU", config).create_infer_request()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return lambda: request.infer([x])


def executorch_call(pte: bytes, shape: tuple[int, ...]) -> Callable[[], object]:
    """An XNNPACK .pte program (the project's lowering), run by ExecuTorch's runtime on 1 thread."""
    import torch
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from executorch.runtime import Runtime

    _unsafe_reset_threadpool(1)
    program = Runtime.get().load_program(pte)
    method = program.load_method("forward")
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    return lambda _keep=program: method.execute([x])


def runtime_call(backend: str, module, shape: tuple[int, ...], dtype: str = "float32") -> Callable[[], object]:
    """One inference of a subnet on the plain runtime the table was built for, converted (an INT8 table's: quantized
    on synthetic batches) as the table's models were."""
    fmt = formats.BACKEND_FORMAT.get(backend, "onnx")  # every onnxruntime backend runs the ONNX model
    model = formats.convert(fmt, module, shape, dtype=dtype)
    if fmt == "onnx":
        return onnxruntime_call(model)
    return {"openvino": openvino_call, "executorch": executorch_call}[fmt](model, shape)


def demo_rows(folder: Path, loop: Loop) -> list[dict]:
    """Exported models with the latency their search predicted, measured by the plain loop."""
    found = []
    summaries = sorted(folder.glob("*.export.json")) or sorted(folder.glob("*/model.export.json"))  # files or folders
    for summary_path in summaries:
        summary = json.loads(summary_path.read_text())
        onnx_path = summary_path.with_name(summary_path.name.removesuffix(".export.json") + ".onnx")
        predicted = summary.get("predicted_latency_ms")
        if predicted is not None and onnx_path.is_file():
            found.append((onnx_path, summary.get("table"), float(predicted)))
    measured = loop.figures([onnxruntime_call(str(onnx_path)) for onnx_path, _, _ in found])
    return [
        {
            "group": "demo",
            "model": str(onnx_path.relative_to(ROOT) if onnx_path.is_relative_to(ROOT) else onnx_path),
            "table": table,
            "predicted_ms": predicted,
            "measured_ms": ms,
        }
        for (onnx_path, table, predicted), ms in zip(found, measured, strict=True)
    ]


def subnet_rows(table_path: Path, resolutions: list[int], n: int, seed: int, loop: Loop) -> list[dict]:
    """Random subnets of the table's space, exported with random weights, predicted and measured twice."""
    table = LatencyTable.load(table_path)
    space, rng, backend = table.space, np.random.default_rng(seed), table.meta["backend"]
    subnets, family = [], family_of(space)
    for r in resolutions:
        for _ in range(n):
            arch = family.sample_arch(space, rng, resolutions=[r])
            subnets.append((f"{r}px", arch, family.build_subnet(space, arch).eval(), (1, space.in_channels, r, r)))
    calls = [runtime_call(backend, module, shape, table.dtype) for _, _, module, shape in subnets]
    first, second = loop.figures(calls), loop.figures(calls)
    return [
        {
            "group": group,
            "model": arch.short(),
            "predicted_ms": table.predict(arch),
            "measured_ms": a,
            "retest_ms": b,
        }
        for (group, arch, _, _), a, b in zip(subnets, first, second, strict=True)
    ]


def share_within(rows: list[dict], tolerance: float = 0.10) -> float | None:
    errors = [abs(r["predicted_ms"] / r["measured_ms"] - 1) for r in rows]
    return round(100 * float(np.mean([e <= tolerance for e in errors])), 1) if errors else None


def retest_within(rows: list[dict], tolerance: float = 0.10) -> float | None:
    """Share of models whose two plain-loop figures agree within ``tolerance`` of the first."""
    errors = [abs(r["retest_ms"] / r["measured_ms"] - 1) for r in rows]
    return round(100 * float(np.mean([e <= tolerance for e in errors])), 1) if errors else None


def mape(rows: list[dict]) -> float | None:
    errors = [abs(r["predicted_ms"] / r["measured_ms"] - 1) for r in rows]
    return round(100 * float(np.mean(errors)), 2) if errors else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--exports",
        type=Path,
        default=next((f for f in DEMO_EXPORTS if f.is_dir()), DEMO_EXPORTS[0]),
        help="a pipeline run's export folder (default runs/digits/export, else the pipeline_demo bench's)",
    )
    parser.add_argument("--table", type=Path, default=ROOT / "latency_tables" / "mbv3_ort-cpu_t1_b1.yaml")
    parser.add_argument("--resolutions", type=int, nargs="+", default=[160, 224])
    parser.add_argument("--n", type=int, default=8, help="random mbv3 subnets per resolution (default 8)")
    parser.add_argument("--warmup", type=int, default=Loop.warmup)
    parser.add_argument("--calls", type=int, default=Loop.calls, help="timed calls per repeat")
    parser.add_argument("--repeats", type=int, default=Loop.repeats, help="repeats per model; the least median counts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    loop = Loop(args.warmup, args.calls, args.repeats)

    demo = demo_rows(args.exports, loop) if args.exports.is_dir() else []
    if not demo:
        print(
            f"demo: no exported models with a predicted latency under {args.exports}; skipped (run `make demo` first)"
        )
    subnets = subnet_rows(args.table, args.resolutions, args.n, args.seed, loop)
    for row in demo + subnets:
        retest = f"  again {row['retest_ms']:8.4f} ms" if "retest_ms" in row else ""
        print(
            f"{row['group']:>9} predicted {row['predicted_ms']:8.4f} ms  plain loop {row['measured_ms']:8.4f} ms"
            f"{retest}  {100 * (row['predicted_ms'] / row['measured_ms'] - 1):+6.1f}%  {row['model']}"
        )
    table_cpu = LatencyTable.load(args.table).meta.get("cpu")
    result = {
        "demo_n": len(demo),
        "demo_within_10pct": share_within(demo),
        "demo_mape": mape(demo),
        "table": str(args.table.relative_to(ROOT) if args.table.is_relative_to(ROOT) else args.table),
        "subnets_n": len(subnets),
        "subnets_within_10pct": share_within(subnets),
        "subnets_mape": mape(subnets),
        "retest_within_10pct": retest_within(subnets),
        **{
            f"subnets_{r}px_within_10pct": share_within([x for x in subnets if x["group"] == f"{r}px"])
            for r in args.resolutions
        },
        "table_measured_on_this_cpu": table_cpu == cpu_name(),
        "loop": loop.describe(),
    }
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
