"""A markdown model card for an exported subnet: what it is, how good and fast it is, how to feed it.

Rendering reads plain data only (the export's result, its space and preprocessing), so a card can be
rendered without running anything.
"""

from __future__ import annotations

from ofa.export.result import BudgetVerdict, ExportResult, Preprocessing
from ofa.families.family import Space
from ofa.lut.measure import Latency


def _num(n: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}%"


def _ms(latency: Latency | None) -> str:
    if latency is None:
        return "not measured"
    return (
        f"{latency.mean_ms:.3g} ± {latency.std_ms:.2g} ms (batch {latency.batch}, {latency.threads} thread(s), "
        f"{latency.samples} timed rounds, {latency.source})"
    )


def render_model_card(result: ExportResult, space: Space, prep: Preprocessing) -> str:
    """Markdown: architecture (per block), MACs, params, accuracy, latency, preprocessing, provenance."""
    arch = result.arch
    lines = [
        f"# {result.onnx_path.name}: once-for-all subnet `{arch.short()}`",
        "",
        _origin(result),
        "",
        *_summary(result, space),
        *_architecture(result, space),
        *_preprocessing(result, prep),
        *_files(result),
    ]
    return "\n".join(lines)


def _origin(result: ExportResult) -> str:
    if result.finetuned_sha256 is not None:
        return (
            "Extracted from a once-for-all supernet, then fine-tuned as a standalone model (`ofa finetune`; "
            "BN statistics its own, not recalibrated at export)."
        )
    bn = (
        f"BN statistics recalibrated on {result.bn_batches} training batches"
        if result.bn_batches
        else "BN statistics kept from the supernet"
    )
    return f"Extracted from a once-for-all supernet without retraining ({bn})."


def _budget(budget: BudgetVerdict) -> str:
    if budget.over_budget:
        return f"**over budget**: {budget.line()}"
    return f"met: measured {budget.measured_ms:.3g} ms for {budget.target_ms:g} ms (within ±{budget.margin_pct:.1f}%)"


def _summary(result: ExportResult, space: Space) -> list[str]:
    arch = result.arch
    lines = [
        "## Summary",
        "",
        "| | |",
        "| --- | --- |",
        f"| input | `{result.onnx_path.name}` input `input`: NCHW float32, "
        f"{'N' if result.dynamic_batch else '1'} × {space.in_channels} × {arch.resolution} × {arch.resolution} |",
        f"| output | `logits`: {space.num_classes} classes |",
        f"| MACs | {_num(result.macs)} ({result.macs:,}) |",
        f"| params | {_num(result.params)} ({result.params:,}) |",
        f"| top-1, fp32 ONNX | {_pct(result.top1_fp32)}"
        f"{f' on {result.test_images} test images' if result.test_images else ''} |",
    ]
    if result.int8_path is not None:
        agree = result.int8_top1_agreement
        lines.append(
            f"| top-1, INT8 ONNX | {_pct(result.top1_int8)}"
            f"{f' (same top-1 as fp32 on {100 * agree:.1f}%)' if agree is not None else ''} |"
        )
    lines += [
        f"| predicted top-1 (search) | {_pct(result.predicted_top1)} |",
        f"| latency, fp32 (measured) | {_ms(result.latency_fp32)} |",
    ]
    if result.int8_path is not None:
        lines.append(f"| latency, INT8 (measured) | {_ms(result.latency_int8)} |")
    predicted = "n/a" if result.predicted_latency_ms is None else f"{result.predicted_latency_ms:.3f} ms"
    if isinstance(arch.extra.get("target_ms"), int | float):
        predicted += f" for a target {arch.extra['target_ms']:g} ms"
    if result.table_noise_pct is not None:
        predicted += f", table noise ±{result.table_noise_pct:.1f}%"
    if result.budget is not None:
        lines.append(f"| latency budget | {_budget(result.budget)} |")
    which = " INT8" if result.table_dtype == "int8" else ""
    return [
        *lines,
        f"| latency,{which} predicted by table | {predicted}{f' (`{result.table}`)' if result.table else ''} |",
        f"| parity vs PyTorch | max abs logit diff {result.parity.max_abs_diff:.2e} "
        f"(allowed {result.parity.allowed:.2e}) on "
        f"{result.parity.real_inputs} real + {result.parity.random_inputs} random inputs, top-1 identical "
        f"on {100 * result.parity.top1_agreement:.1f}% |",
        "",
    ]


def _architecture(result: ExportResult, space: Space) -> list[str]:
    arch = result.arch
    layers = space.layers(arch)
    headers = ["#", "layer", "input", "out channels", *layers[0].card_cells(), "MACs"]
    lines = [
        "## Architecture",
        "",
        f"Resolution {arch.resolution}, depths {list(arch.depths)}.",
        "",
        f"| {' | '.join(headers)} |",
        f"|{' --- |' * len(headers)}",
    ]
    for i, layer in enumerate(layers):
        cells = [str(i), layer.kind, f"{layer.in_hw}×{layer.in_hw}×{layer.in_c}", str(layer.out_c)]
        cells += [*layer.card_cells().values(), _num(layer.macs)]
        lines.append(f"| {' | '.join(cells)} |")
    return [*lines, ""]


def _preprocessing(result: ExportResult, prep: Preprocessing) -> list[str]:
    names = prep.class_names
    listed = ", ".join(names[:20]) + (f", … ({len(names)} in all)" if len(names) > 20 else "")
    r = result.arch.resolution
    how = f"Resize to {r}×{r}"
    if prep.resize:
        how = (
            f"Resize ({prep.resize.get('interpolation', 'bilinear')}) and centre-crop {r}×{r} "
            f"(crop_pct {prep.resize.get('crop_pct', 1.0)}, as the weights were trained)"
        )
    return [
        "## Preprocessing",
        "",
        f"{how}, scale pixels to [0, 1], then `(x - mean) / std` per channel "
        f"with mean `{prep.mean}` and std `{prep.std}`.",
        "",
        f"Classes: {listed}.",
        "",
    ]


def _files(result: ExportResult) -> list[str]:
    onnx_name, pt_name = result.onnx_path.name, result.subnet_path.name
    lines = [
        "## Files and provenance",
        "",
        f"- `{onnx_name}`: fp32 ONNX, opset {result.opset}, "
        f"{'dynamic' if result.dynamic_batch else 'fixed'} batch; metadata in `metadata_props` (`ofa.*`).",
    ]
    if result.int8_path is not None:
        lines.append(
            f"- `{result.int8_path.name}`: INT8 (QDQ, static post-training quantization calibrated on training images)."
        )
    return [
        *lines,
        f"- `{pt_name}`: the static PyTorch (timm MobileNetV3) model"
        + (
            " as safetensors (timm's `state_dict`): `ofa.load_subnet('<this folder>')`."
            if result.subnet_path.suffix == ".safetensors"
            else f": `ofa.load_subnet('{pt_name}')`."
        ),
        f"- supernet checkpoint sha256: `{result.supernet_sha256 or 'unknown'}`; space fingerprint "
        f"`{result.space_fingerprint}`.",
        *([f"- fine-tuned subnet file sha256: `{result.finetuned_sha256}`."] if result.finetuned_sha256 else []),
        f"- arch: `{result.arch.to_json()}`",
        "",
        "## Usage",
        "",
        "```python",
        "import onnxruntime as ort",
        f"session = ort.InferenceSession('{onnx_name}')",
        "logits = session.run(None, {'input': images})[0]  # images: preprocessed as above",
        "```",
        "",
    ]
