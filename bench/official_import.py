"""Official once-for-all checkpoints imported: do our subnets compute the official logits?

``--family mbv3`` (default) imports the w1.0 fixture (exactly the shapes of the published
``ofa_mbv3_d234_e346_k357_w1.0``, random perturbed weights, written by the official code) and the small
w0.5 one; ``--family proxyless`` the w1.3 fixture (the published ``ofa_proxyless_d234_e346_k357_w1.3``)
and the small w0.5 one; ``--family resnet`` the OFA-ResNet50 fixture (widths 0.1/0.15/0.2, 10 classes).
Each compares the logits of the supernet and of each extracted timm subnet with the official network's
(target: max abs difference ≤ 1e-5; logits are of order 1-10) and checks each extracted subnet's ONNX
export (target ≤ 1e-4).

    python -m bench.official_import [--family mbv3|proxyless|resnet] [--fixtures DIR] [--json]

The fixtures live outside the repository (../shared/fixtures/ofa_official); without them the
script says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

from bench.common import ROOT
from ofa.families.importing import official_family
from ofa.runtime.convert import export_onnx

DEFAULT_FIXTURES = ROOT.parent / "shared" / "fixtures" / "ofa_official"
TARGET_ATOL = 1e-5
TARGET_ONNX_ATOL = 1e-4
# family -> (fixture tags, import settings the shapes cannot tell, whether to check ONNX)
FIXTURES: dict[str, tuple[tuple[str, ...], dict[str, Any], bool]] = {
    "mbv3": (("mbv3_w1.0", "mbv3_w0.5_c10"), {}, True),
    "proxyless": (("proxyless_w1.3", "proxyless_w0.5_c10"), {}, True),
    "resnet": (("resnet50_w0.1-0.15-0.2_c10",), {"widths": (0.1, 0.15, 0.2)}, True),
}


def _onnx_diff(model: torch.nn.Module, x: torch.Tensor, expected: torch.Tensor) -> float:
    session = ort.InferenceSession(export_onnx(model, tuple(x.shape)), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    return float(np.abs(y - expected.numpy()).max())


def check(checkpoint: Path, expected_path: Path, settings: dict[str, Any], onnx: bool) -> dict:
    """Import time and worst logit differences over the fixture's subnets (the family found from the file)."""
    family = official_family(checkpoint)
    start = time.perf_counter()
    net = family.official_import(checkpoint, family.import_config(**settings)).eval()
    import_s = time.perf_counter() - start
    expected = torch.load(expected_path, weights_only=True)
    worst_supernet = worst_subnet = worst_onnx = 0.0
    for config, x, official in zip(expected["archs"], expected["inputs"], expected["logits"]):
        arch = net.set_active(family.official_arch(net.space, config, str(expected_path)))
        sub = net.extract(arch).eval()
        with torch.no_grad():
            worst_supernet = max(worst_supernet, (net(x) - official).abs().max().item())
            worst_subnet = max(worst_subnet, (sub(x) - official).abs().max().item())
        worst_onnx = max(worst_onnx, _onnx_diff(sub, x, official)) if onnx else worst_onnx
    out = {
        "family": family.name,
        "subnets": len(expected["archs"]),
        "choices": {k: list(v) for k, v in net.space.elastic_dims().items() if k != "resolutions"},
        "max_abs_diff_supernet": worst_supernet,
        "max_abs_diff_subnet": worst_subnet,
        "import_s": round(import_s, 2),
    }
    return {**out, "max_abs_diff_onnx": worst_onnx} if onnx else out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(FIXTURES), default="mbv3")
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    tags, settings, onnx = FIXTURES[args.family]
    if not all((args.fixtures / f"ofa_{tag}_random.pth").is_file() for tag in tags):
        print(json.dumps({"skipped": f"no official {args.family} fixtures at {args.fixtures}"}))
        return
    torch.set_num_threads(1)
    results = {
        tag: check(args.fixtures / f"ofa_{tag}_random.pth", args.fixtures / f"ofa_{tag}_expected.pt", settings, onnx)
        for tag in tags
    }
    worst = max(max(r["max_abs_diff_supernet"], r["max_abs_diff_subnet"]) for r in results.values())
    worst_onnx = max(r.get("max_abs_diff_onnx", 0.0) for r in results.values())
    summary = {**results, "max_abs_diff": worst, "target_atol": TARGET_ATOL}
    summary["pass"] = worst <= TARGET_ATOL and worst_onnx <= TARGET_ONNX_ATOL
    if onnx:
        summary.update(max_abs_diff_onnx=worst_onnx, target_onnx_atol=TARGET_ONNX_ATOL)
    if not args.json:
        for tag, r in results.items():
            print(
                f"{tag}: {r['subnets']} subnets, supernet {r['max_abs_diff_supernet']:.2e}, "
                f"timm subnet {r['max_abs_diff_subnet']:.2e}"
                + (f", ONNX {r['max_abs_diff_onnx']:.2e}" if onnx else "")
                + f" max abs diff, import {r['import_s']} s"
            )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
