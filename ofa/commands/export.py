"""``ofa export``: one subnet of a supernet to a verified ONNX model (+ INT8, static PyTorch model, model card)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ofa.commands._flags import add_flags, flag_values
from ofa.runtime.formats import FORMAT_BACKEND


def register(subparsers: argparse._SubParsersAction) -> None:
    from ofa.export.export import ExportConfig

    p = subparsers.add_parser(
        "export",
        help="export a searched subnet to ONNX, verified against PyTorch",
        description="Extract the subnet ARCH from the supernet, recalibrate its BN statistics on training images, "
        "export it to ONNX and check it: onnx.checker, onnxruntime vs PyTorch parity (max |diff| <= "
        "1e-4 + 1e-5 × max |logit|, same top-1), test-split accuracy and latency. OUT=DIR writes a model "
        "folder for timm and the "
        "Hugging Face Hub: model.safetensors, config.json (timm's config + the arch), README.md (model "
        "card), model.onnx, model.export.json (summary) and, with --int8, model.int8.onnx. "
        "OUT=MODEL.onnx writes MODEL.onnx, MODEL.pt (for ofa.load_subnet), MODEL.md, MODEL.export.json "
        "(and .int8.onnx) and that model folder beside them as MODEL/. --subnet FILE exports a subnet "
        "fine-tuned by `ofa finetune` instead, with the same checks and no second BN recalibration.",
    )
    p.add_argument("--supernet", metavar="CKPT", help="supernet file or training checkpoint (with --arch)")
    p.add_argument(
        "--subnet",
        metavar="SUBNET.pt",
        help="a fine-tuned subnet file (`ofa finetune`'s subnet.pt) to export as it is, instead of "
        "--supernet and --arch",
    )
    p.add_argument("--arch", metavar="ARCH.json", help="subnet to export (arch JSON, e.g. from `ofa search`)")
    p.add_argument(
        "--lut",
        metavar="TABLE",
        help="latency table: measure with its protocol, print its prediction "
        "(default: the arch JSON's `lut` field when that file exists)",
    )
    add_flags(p, ExportConfig, {"formats": {"choices": tuple(FORMAT_BACKEND)}})
    p.set_defaults(func=run)


def _ms(lat: Any) -> str:
    return f"{lat.mean_ms:.3g} ± {lat.std_ms:.2g} ms" if lat is not None else "n/a"


def run(args: argparse.Namespace) -> int:
    from ofa.commands._export_files import export_file
    from ofa.export.export import ExportConfig

    cfg = ExportConfig(**flag_values(ExportConfig, args), progress=True)
    r = export_file(
        Path(args.supernet) if args.supernet else None,
        Path(args.arch) if args.arch else None,
        cfg,
        Path(args.lut) if args.lut else None,
        Path(args.subnet) if args.subnet else None,
    )
    _print_result(r)
    return 0


def _print_result(r: Any) -> None:
    p = r.parity
    print(
        f"exported {r.arch.short()} -> {r.onnx_path} (opset {r.opset}, "
        f"{'dynamic' if r.dynamic_batch else 'fixed'} batch, {r.macs / 1e6:.2f}M MACs, {r.params / 1e3:.1f}k params)"
    )
    kept = "none (the fine-tuned subnet's own statistics)" if r.finetuned_sha256 else "none (supernet statistics)"
    print(f"  BN recalibration: {f'{r.bn_batches} training batches' if r.bn_batches else kept}")
    print(
        f"  parity vs PyTorch: max |logit diff| {p.max_abs_diff:.2e} on {p.real_inputs} test images + "
        f"{p.random_inputs} random inputs (batch sizes {', '.join(map(str, p.batch_sizes))}), top-1 identical"
    )
    if r.top1_fp32 is not None:
        int8 = f", int8 {r.top1_int8:.2f}%" if r.top1_int8 is not None else ""
        print(
            f"  top-1 on {r.test_images} test images: fp32 {r.top1_fp32:.2f}%{int8}"
            + (f" (predicted {r.predicted_top1:.2f}%)" if r.predicted_top1 is not None else "")
        )
    if r.latency_fp32 is not None:
        lat = r.latency_fp32
        line = f"  latency ({lat.source}, batch {lat.batch}, {lat.threads} thread(s)): fp32 {_ms(lat)}"
        if r.latency_int8 is not None:
            line += f", int8 {_ms(r.latency_int8)}"
        if r.predicted_latency_ms is not None:
            ref = r.latency_int8 if r.table_dtype == "int8" and r.latency_int8 is not None else lat  # its model's
            line += f"; {'INT8 ' if ref is not lat else ''}table predicts {r.predicted_latency_ms:.3g} ms"
            line += f" ({100 * (ref.mean_ms / r.predicted_latency_ms - 1):+.1f}%)" if r.predicted_latency_ms else ""
        print(line)
    for f in r.formats:
        top1 = f"; test top-1 {f.top1:.2f}% (the ONNX model's prediction on every image)" if f.top1 is not None else ""
        lat = f"; latency {_ms(f.latency)} (same protocol)" if f.latency is not None else ""
        print(
            f"  {f.format} ({f.runtime}): parity max |logit diff| {f.parity.max_abs_diff:.2e}, top-1 identical"
            f"{top1}{lat} -> {', '.join(f.files)}"
        )
    if r.folder is not None and r.folder != r.onnx_path.parent:
        written = [r.onnx_path, *([r.int8_path] if r.int8_path else []), r.subnet_path, r.card_path, r.summary_path]
        print("  wrote " + ", ".join(str(w) for w in written))
    print(f"  model folder (timm/Hub): {r.folder}")
