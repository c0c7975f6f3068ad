"""Official once-for-all checkpoints imported: do our subnets compute the official logits?

For ``--family mbv3`` imports the w1.0 fixture (exactly the shapes of the published
``ofa_mbv3_d234_e346_k357_w1.0``, random perturbed weights, written by the official code) and the
small w0.5 one; for ``--family proxyless`` the w1.3 fixture (the published
``ofa_proxyless_d234_e346_k357_w1.3``) and the small w0.5 one. Compares the logits of the supernet
and of each extracted timm subnet with the official network's for every fixture subnet (target:
max abs difference ≤ 1e-5; logits are of order 1-10).

    python -m bench.official_import [--family mbv3|proxyless] [--fixtures DIR] [--json]

The fixtures live outside the repository (../shared/fixtures/ofa_official); without them the
script says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from bench.common import ROOT
from ofa.families.family import Family
from ofa.families.registry import get_family

DEFAULT_FIXTURES = ROOT.parent / "shared" / "fixtures" / "ofa_official"
TARGET_ATOL = 1e-5
FIXTURE_TAGS = {"mbv3": ("w1.0", "w0.5_c10"), "proxyless": ("w1.3", "w0.5_c10")}  # the published width first


def check(family: Family, checkpoint: Path, expected_path: Path) -> dict:
    """Import time and worst logit differences over the fixture's subnets."""
    start = time.perf_counter()
    net = family.official_import(checkpoint, family.import_config()).eval()
    import_s = time.perf_counter() - start
    expected = torch.load(expected_path, weights_only=True)
    worst_supernet = worst_subnet = 0.0
    for config, x, official in zip(expected["archs"], expected["inputs"], expected["logits"]):
        arch = net.set_active(family.arch_type.from_ofa_config(config))
        with torch.no_grad():
            worst_supernet = max(worst_supernet, (net(x) - official).abs().max().item())
            worst_subnet = max(worst_subnet, (net.extract(arch).eval()(x) - official).abs().max().item())
    return {
        "subnets": len(expected["archs"]),
        "stage_widths": list(net.space.stage_channels),
        "feature_width": net.space.feature_channels,
        "max_abs_diff_supernet": worst_supernet,
        "max_abs_diff_subnet": worst_subnet,
        "import_s": round(import_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(FIXTURE_TAGS), default="mbv3")
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    name, tags = args.family, FIXTURE_TAGS[args.family]
    if not (args.fixtures / f"ofa_{name}_{tags[0]}_random.pth").is_file():
        print(json.dumps({"skipped": f"no official {name} fixtures at {args.fixtures}"}))
        return
    torch.set_num_threads(1)
    family = get_family(name)
    results = {
        tag: check(
            family, args.fixtures / f"ofa_{name}_{tag}_random.pth", args.fixtures / f"ofa_{name}_{tag}_expected.pt"
        )
        for tag in tags
    }
    worst = max(max(r["max_abs_diff_supernet"], r["max_abs_diff_subnet"]) for r in results.values())
    summary = {**results, "max_abs_diff": worst, "target_atol": TARGET_ATOL, "pass": worst <= TARGET_ATOL}
    if not args.json:
        for tag, r in results.items():
            print(
                f"{tag}: {r['subnets']} subnets, supernet {r['max_abs_diff_supernet']:.2e}, "
                f"timm subnet {r['max_abs_diff_subnet']:.2e} max abs diff, import {r['import_s']} s"
            )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
