"""The README of a packed folder (`ofa lut pack`): how to time its models on a device and bring the figures back."""

from __future__ import annotations

TOOLS = {
    "onnx": (
        "ONNX Runtime's `onnxruntime_perf_test` (built with onnxruntime, or from its release archives)",
        "onnxruntime_perf_test -e cpu -x 1 -r 200 -I {model}",
        "Average inference time cost: (?P<ms>[\\d.]+) ms",
    ),
    "openvino": (
        "OpenVINO's `benchmark_app` (`pip install openvino` ships it; C++ build in the OpenVINO archives)",
        "benchmark_app -m {model} -d CPU -hint none -nstreams 1 -nthreads 1 -api sync -niter 200",
        # its median line rounds to 0.01 ms; with one sync request the throughput line is 1000 / mean ms, precise
        "Throughput:\\s+(?P<fps>[\\d.]+) FPS",
    ),
    "executorch": (
        "ExecuTorch's `executor_runner` built with XNNPACK (`examples/portable/executor_runner`, "
        "`-DEXECUTORCH_BUILD_XNNPACK=ON`), or its `benchmark` app on Android",
        "executor_runner --model_path {model} --num_executions 200",
        "executed successfully (?P<calls>\\d+) time\\(s\\) in (?P<ms>[\\d.]+) ms",
    ),
}


def render_pack_readme(fmt: str, count: int) -> str:
    """Instructions for one pack of ``count`` models in format ``fmt``."""
    tool, example, regex = TOOLS[fmt]
    return f"""# Models for a latency table ({fmt})

{count} models: every layer config of the space (`kind: layer`), the calibration subnets the per-resolution
correction is fitted on (`kind: calibration`), the drift probes `ofa lut check` re-times (`kind: probe`) and
the empty model (`<empty>`, the per-call overhead). `manifest.yaml` maps each key to its file, input shape
(random input is fine: latency does not depend on the values) and format.

## Time them on the device

Time each model on its own, warm, with the runtime's own benchmark tool: {tool}.
For example: `{example}`. Run every model the same way (same threads, same settings), ideally several
times in a shuffled order, and keep the median.

On Android, push the folder and the tool (`adb push . /data/local/tmp/pack`) and run the tool with
`adb shell`, e.g. `adb shell /data/local/tmp/TOOL ... /data/local/tmp/pack/{{file}}`. LiteRT's
`benchmark_model --graph=MODEL.tflite --num_threads=1` works the same way for `.tflite` models.

## Bring the figures back

Either let `ofa` run the tool for you, model by model, and read the time from its output:

    ofa lut build --space SPACE --backend {fmt} --out TABLE.yaml \\
        --runner '{example}' --runner-regex '{regex}'

(`{{model}}`: the model's local path; `{{file}}`: its path inside this folder, for a copy on a device. The
regex's groups `value` and `unit`, or its group `ms`, `us`, `s` or `fps`, or its first group, in ms, is the
figure; a group `calls` divides a total, as `executor_runner` prints one over all its executions.)
Or collect a CSV by hand, one row per manifest key, header `key,median_ms` (optional `samples`,
`std_ms`), and import it:

    ofa lut import THIS_FOLDER --timings timings.csv --out TABLE.yaml
"""
