"""Cost of elasticity: one SGD step of the supernet vs the extracted static model.

Forward + backward + optimizer step, batch 16, resolution 128, 1000 classes, a family's published space
(``--space mbv3``, the default, ``proxyless`` (OFA-ProxylessNAS w1.3, its static twin timm's EfficientNet) or
``ofa_resnet50`` (its twin timm's ByobNet)), with the largest, a middle (median MACs of 1,000
seeded samples) and the smallest subnet active. Each round times every subnet's supernet step next to
its static twin's step, alternating which goes first, so machine noise hits both alike; the overhead is
the median of the per-round ratios, and its interquartile range shows how noisy the machine was.
``--invocations N`` runs the whole measurement in N fresh processes and reports the median of their
medians, with each one's figure: one process can draw a heap layout that makes the allocator return
memory and fault it back in every step (the ``faults_*`` figures count minor page faults per step), and
a fresh process draws again. ``forward_ms``, ``backward_ms`` and ``update_ms`` give each model's median time
of that part of the step (the optimizer's update over a supernet's full-size tensors is the part a static
twin does not have).

The supernet computes squeeze-excite as two matmuls on the pooled vector, timm's static model as two 1x1
convolutions, which cost more on a CPU, and a depthwise conv's backward for kernels from 5 as forward
convolutions (`ofa.families.depthwise_grad`), where oneDNN's own is slow; those savings sit in the default
ratio. ``--same-ops`` gives the static twin the supernet's squeeze-excite code at its own width and its
depthwise convolution, so the ratio counts only what elasticity costs (slices, kernel transforms,
full-size gradients and optimizer state). ``--update used`` gives the supernet the optimizer of a recipe's
``optimizer.update: used`` (`ofa.train.used_sgd.UsedWeightsSGD`, same settings as the twin's SGD), which
updates only the region of each weight the step used, where the family's ops record it (resnet).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from timm.models._efficientnet_blocks import SqueezeExcite

from bench.step_timing import (
    SGD_SETTINGS,
    add_timing_arguments,
    check_timing_arguments,
    invocation_command,
    measure,
    median_of_invocations,
    report,
    sgd,
    summarize,
)
from ofa.families.depthwise_grad import depthwise_conv2d
from ofa.families.family import Arch, Space
from ofa.families.mbv3.elastic import ElasticSqueezeExcite
from ofa.families.registry import family_of
from ofa.train.used_sgd import UsedWeightsSGD
from search.latency import space_from_arg


def middle_arch(space: Space, resolution: int, samples: int = 1000, seed: int = 0) -> Arch:
    """The sample at the median MACs (index n // 2 when sorted) of ``samples`` seeded draws."""
    rng, sample = np.random.default_rng(seed), family_of(space).sample_arch
    archs = [sample(space, rng, resolutions=[resolution]) for _ in range(samples)]
    return sorted(archs, key=space.macs)[samples // 2]


def with_supernet_se(static: torch.nn.Module) -> torch.nn.Module:
    """``static`` with each squeeze-excite module replaced by the supernet's (`ElasticSqueezeExcite` at
    the block's width, same weights): the same function, computed by the same code as the supernet's."""
    for block in static.modules():
        se = getattr(block, "se", None)
        if isinstance(se, SqueezeExcite):  # blocks without SE hold an nn.Identity there
            same = ElasticSqueezeExcite(se.conv_reduce.in_channels)
            same.load_state_dict(se.state_dict())
            block.se = same.train(se.training)
    return static


class SupernetDepthwise(torch.nn.Module):
    """A static depthwise conv computed by the supernet's code (`depthwise_conv2d`), same weight."""

    def __init__(self, conv: torch.nn.Conv2d) -> None:
        super().__init__()
        self.weight, self.stride, self.padding = conv.weight, conv.stride[0], conv.padding[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return depthwise_conv2d(x, self.weight, self.stride, self.padding)


def with_supernet_ops(static: torch.nn.Module) -> torch.nn.Module:
    """`with_supernet_se`, and each depthwise conv (a timm block's ``conv_dw``) replaced by `SupernetDepthwise`:
    the same function, computed by the supernet's code wherever that differs from timm's."""
    for block in with_supernet_se(static).modules():
        conv = getattr(block, "conv_dw", None)
        if isinstance(conv, torch.nn.Conv2d) and conv.groups == conv.in_channels == conv.out_channels:
            block.conv_dw = SupernetDepthwise(conv)
    return static


def one_invocation(args: argparse.Namespace) -> dict[str, object]:
    """The whole measurement in this process."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    clock = time.thread_time if args.cpu_time else time.perf_counter
    torch.manual_seed(0)
    space = space_from_arg(args.space)
    supernet = family_of(space).supernet_type(space).train()
    x = torch.randn(args.batch, space.in_channels, args.resolution, args.resolution)
    y = torch.randint(0, space.num_classes, (args.batch,))
    subnets = three_subnets(space, args.resolution)
    runs = {}
    for name, arch in subnets.items():
        static = supernet.extract(arch).train()
        static = with_supernet_ops(static) if args.same_ops else static
        runs[name] = (arch, static, sgd(static))
    super_opt = supernet_optimizer(supernet, args.update)
    result = summarize(*measure(supernet, supernet.set_active, runs, (x, y), args.rounds, clock, super_opt))
    result["space"] = args.space
    result["twin_ops"] = "supernet" if args.same_ops else "timm"
    result["update"] = args.update
    result["threads"] = torch.get_num_threads()
    result["clock"] = "thread_cpu" if args.cpu_time else "wall"
    result["mid_arch"] = subnets["mid"].short()
    result["mid_macs_m"] = round(space.macs(subnets["mid"]) / 1e6, 1)
    return result


def supernet_optimizer(supernet: torch.nn.Module, update: str) -> torch.optim.Optimizer:
    """`sgd`'s optimizer, or with ``update`` "used" the same settings in `UsedWeightsSGD`."""
    if update == "used":
        return UsedWeightsSGD(supernet, supernet.parameters(), **SGD_SETTINGS)
    return sgd(supernet)


def three_subnets(space: Space, resolution: int) -> dict[str, Arch]:
    """The largest, the middle (`middle_arch`) and the smallest subnet at ``resolution``."""
    return {"max": space.max_arch(resolution), "mid": middle_arch(space, resolution), "min": space.min_arch(resolution)}


def several_invocations(args: argparse.Namespace) -> dict[str, object]:
    """The measurement in ``args.invocations`` fresh processes, one after another: the median of their
    medians, and each one's median (``*_runs``)."""
    command = invocation_command("bench.elastic_overhead", args)
    command += ["--threads", str(args.threads)] if args.threads is not None else []
    command += ["--cpu-time"] if args.cpu_time else []
    command += ["--same-ops"] if args.same_ops else []
    command += ["--space", args.space, "--update", args.update]
    passed_on = ["space", "twin_ops", "update", "threads", "clock", "mid_arch", "mid_macs_m"]
    return median_of_invocations(command, args.invocations, passed_on)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_timing_arguments(parser, rounds=21, invocations=1)
    parser.add_argument("--space", default="mbv3", help="a family's preset space (mbv3, proxyless, ofa_resnet50)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with this thread's CPU clock (needs --threads 1): steadier on a shared machine",
    )
    parser.add_argument(
        "--same-ops",
        action="store_true",
        help="static twin runs the supernet's squeeze-excite and depthwise code: the ratio counts elasticity alone",
    )
    parser.add_argument(
        "--update",
        choices=["all", "used"],
        default="all",
        help="the supernet's SGD updates every weight with a gradient (all) or only what the step used (used)",
    )
    args = parser.parse_args()
    check_timing_arguments(parser, args)
    if args.same_ops and args.space not in ("mbv3", "proxyless"):
        parser.error("--same-ops is for the mbv3 and proxyless spaces (squeeze-excite, depthwise convs)")
    if args.update == "used" and args.space in ("mbv3", "proxyless"):
        parser.error("--update used is for the ofa_resnet50 space (whose ops record what a step used)")
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time needs --threads 1 (other threads' CPU time would not be counted)")
    result = several_invocations(args) if args.invocations > 1 else one_invocation(args)
    report(result, args.json)


if __name__ == "__main__":
    main()
