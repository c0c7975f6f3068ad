"""The official OFA code's cost of elasticity, timed exactly as `bench.elastic_overhead` times ours.

One SGD step of an official supernet with a subnet active, against the static network its
``get_active_subnet(preserve_weight=True)`` returns: ``--space mbv3`` (``OFAMobileNetV3`` w1.0, the
default), ``proxyless`` (``OFAProxylessNASNets`` w1.3) or ``ofa_resnet50`` (``OFAResNets``), each built
with our preset space's choices; batch 16, 128 px, 1000 classes, the same three subnets as
`bench.elastic_overhead` (largest, middle, smallest of that space, in the official encoding), the same
interleaved rounds, optimizer and median of per-round ratios, and ``--invocations N`` fresh processes.

The official package is not a dependency (its import name is ``ofa``, like ours). Point ``--official``
at its wheel or at a folder holding its ``ofa`` package; the measurement then runs in processes
whose ``ofa`` is the official one (it comes first on their path, and they run outside the repository,
whose own ``ofa`` folder would otherwise shadow it):

    pip download ofa==0.1.0.post202307202001 --no-deps -d runs/official
    python -m bench.official_overhead --official runs/official/ofa-0.1.0.post202307202001-py3-none-any.whl

Without it, the script says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from bench import step_timing as timing
from bench.common import ROOT

DEFAULT_WHEEL = ROOT / "runs" / "official" / "ofa-0.1.0.post202307202001-py3-none-any.whl"


def official_spec(space_name: str, resolution: int) -> dict[str, object]:
    """What a worker builds and times for a preset space: the official ``networks`` class, its constructor's
    keywords (the space's choice lists) and `bench.elastic_overhead`'s three subnets in the official
    encoding (no ``r``)."""
    # This project's ofa, imported here in the parent process only: the workers' ofa is the official one.
    from bench.elastic_overhead import three_subnets
    from ofa.families.registry import family_of
    from search.latency import space_from_arg

    space = space_from_arg(space_name)
    family = family_of(space).name
    kwargs: dict[str, object] = {"n_classes": space.num_classes, "dropout_rate": space.dropout}
    if family == "resnet":
        network = "OFAResNets"
        lists = {"depth_list": space.depths, "expand_ratio_list": space.expands, "width_mult_list": space.widths}
    else:
        network = "OFAProxylessNASNets" if family == "proxyless" else "OFAMobileNetV3"
        lists = {"ks_list": space.kernels, "expand_ratio_list": space.expands, "depth_list": space.depths}
        kwargs["width_mult"] = space.width_mult
    kwargs.update({k: list(v) for k, v in lists.items()})
    subnets = three_subnets(space, resolution)
    configs = {name: {k: v for k, v in arch.to_ofa_config().items() if k != "r"} for name, arch in subnets.items()}
    return {"network": network, "kwargs": kwargs, "subnets": configs}


def worker(args: argparse.Namespace) -> dict[str, object]:
    """The measurement in this process, whose ``ofa`` package is the official code's."""
    from ofa.imagenet_classification.elastic_nn import networks

    spec = json.loads(args.worker)
    torch.manual_seed(0)
    supernet = getattr(networks, spec["network"])(**spec["kwargs"]).train()
    x = torch.randn(args.batch, 3, args.resolution, args.resolution)
    y = torch.randint(0, spec["kwargs"]["n_classes"], (args.batch,))
    runs = {}
    for name, config in spec["subnets"].items():
        supernet.set_active_subnet(**config)
        static = supernet.get_active_subnet(preserve_weight=True).train()
        runs[name] = (config, static, timing.sgd(static))

    def activate(config: dict[str, list]) -> None:
        supernet.set_active_subnet(**config)

    result = timing.summarize(*timing.measure(supernet, activate, runs, (x, y), args.rounds, time.perf_counter))
    result["threads"] = torch.get_num_threads()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    parser.add_argument("--official", type=Path, default=DEFAULT_WHEEL, help="the official ofa wheel or package folder")
    timing.add_timing_arguments(parser, rounds=21, invocations=3)
    parser.add_argument("--space", default="mbv3", help="a family's preset space (mbv3, proxyless, ofa_resnet50)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: the subnets to time, as JSON
    args = parser.parse_args(argv)
    timing.check_timing_arguments(parser, args)
    if args.worker is not None:
        print(json.dumps(worker(args)))
        return 0
    if not args.official.exists():
        print(f"official_overhead: skipped: no official ofa package at {args.official} (see --help)")
        if args.json:
            print(json.dumps({"skipped": f"no official ofa package at {args.official}"}))
        return 0
    from ofa.utils.errors import OFAError  # this project's ofa: only the workers import the official one

    try:
        spec = official_spec(args.space, args.resolution)
    except OFAError as exc:
        parser.error(str(exc))
    command = [*timing.invocation_command("bench.official_overhead", args), "--worker", json.dumps(spec)]
    # The official ofa ahead of site-packages and of this repository (which gives `bench`); the workers run in
    # bench/, where no `ofa` folder stands first on their path.
    env = {"PYTHONPATH": os.pathsep.join([str(args.official.resolve()), str(ROOT)])}
    runs = timing.median_of_invocations(command, args.invocations, ["threads"], env, cwd=ROOT / "bench")
    runs["space"], runs["official_network"] = args.space, spec["network"]
    timing.report(runs, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
