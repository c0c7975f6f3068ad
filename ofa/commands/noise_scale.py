"""``ofa noise-scale RECIPE [--steps N]``: gradient noise scale and a batch size to train with.

Measures B_simple = tr(Σ)/|G|² (McCandlish et al. 2018) for one phase at the weights of a run's
newest checkpoint (``--run``) or of a fresh network, prints the critical batch size estimate, where
the recipe's global batch sits relative to it, and the one suggested batch size with its learning rate.
"""

from __future__ import annotations

import argparse
import json
import os

from ofa.commands._flags import add_flags, flag_values
from ofa.train.noise_measure import NoiseMeasureConfig, measure_noise_scale_file
from ofa.train.noise_scale import log_interval


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "noise-scale", help="measure the gradient noise scale (critical batch size)", description=__doc__
    )
    p.add_argument("recipe", help="recipe YAML")
    p.add_argument("--run", help="run folder whose newest checkpoint gives the weights and the current phase")
    add_flags(p, NoiseMeasureConfig)
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a recipe value"
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = NoiseMeasureConfig(**flag_values(NoiseMeasureConfig, args))
    result = measure_noise_scale_file(args.recipe, cfg, args.overrides, args.run)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, rank 0 reports
        return 0
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    b = result.b_simple
    print(
        f"phase {result.phase!r}: gradient noise scale over {result.steps} steps, "
        f"batches of {result.b_small} and {result.b_big} images"
    )
    print(f"  tr(Σ) = {result.trace_sigma:.4g}   |G|² = {result.grad_sq:.4g}")
    if b is None:
        print(
            "  B_simple: not measurable (|G|² estimate <= 0: the gradient is lost in the noise; "
            "use more --steps or a larger --accumulate)"
        )
        return 0
    sd = result.b_simple_log_sd
    spread = " (68%: {:.0f}-{:.0f} over the steps)".format(*log_interval(b, sd)) if sd is not None else ""
    print(f"  critical batch size (B_simple) ≈ {b:.0f} images{spread}")
    print(f"  {result.advice}")
    capped = " (capped at a quarter of the training set)" if result.suggested_batch * 1.5 < b else ""
    print(
        f"  at global batch {result.suggested_batch}{capped} the learning rate by the paper's rule "
        f"ε ∝ 1/(1 + B_simple/B) is {result.suggested_lr:.3g} (now {result.lr:.3g} at {result.current_global_batch})"
    )
    return 0
