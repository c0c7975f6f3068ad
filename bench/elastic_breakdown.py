"""Where the smallest subnet's elastic overhead goes: five models that compute the same function, each
adding one part of the supernet to the one before.

- ``static``: the extracted timm model (`bench.elastic_overhead`'s static twin, the baseline);
- ``same_se``: that model with the supernet's squeeze-excite code (matmuls on the pooled vector);
- ``exact``: a supernet whose space holds only the smallest subnet's choices: the supernet's code with
  nothing elastic to do (no slices, kernel transforms or full-size tensors);
- ``no_transforms``: a supernet of the full space with the smallest kernel size alone, its depthwise
  weights the transformed kernels: elastic widths and depths (slices, full-size gradients and momentum)
  without kernel transforms;
- ``supernet``: the supernet of the full space.

Each ratio is a model's SGD step over the static model's (batch 16, 128 px, 1000 classes), the median of
interleaved rounds; ``--invocations N`` reports the median of N fresh processes. The differences of
successive ratios (``part_*``) price each part: squeeze-excite code, the rest of the supernet's block
code, elastic widths and depths, kernel transforms. Being differences of medians, they need about a
hundred rounds to rise above a shared machine's noise; and glibc is told to keep the memory it frees
(five models in one process otherwise make it hand memory back and fault it in again every step, on
whichever model allocates next: the ``faults_*`` figures count those page faults).
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench.elastic_overhead import with_supernet_se
from bench.step_timing import (
    add_timing_arguments,
    check_timing_arguments,
    invocation_command,
    measure_models,
    median_of_invocations,
    report,
    sgd,
    summarize,
)
from ofa.families.mbv3.elastic import ElasticDepthwiseConv2d
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.supernet import OFAMobileNetV3

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
PARTS = {  # part -> (model with it, model without it)
    "se_code": ("same_se", None),
    "block_code": ("exact", "same_se"),
    "elastic_widths_depths": ("no_transforms", "exact"),
    "kernel_transforms": ("supernet", "no_transforms"),
}


def without_transforms(supernet: OFAMobileNetV3, kernel: int) -> OFAMobileNetV3:
    """A supernet of ``supernet``'s space with ``kernel`` as its only kernel size, whose depthwise weights
    are ``supernet``'s transformed to that size: every subnet with that kernel computes the same function
    in both, the copy without a kernel transform."""
    net = OFAMobileNetV3(replace(supernet.space, kernels=(kernel,))).train(supernet.training)
    state = {k: v for k, v in supernet.state_dict().items() if ".transforms." not in k}
    with torch.no_grad():
        for name, conv in supernet.named_modules():
            if isinstance(conv, ElasticDepthwiseConv2d):
                state[f"{name}.weight"] = conv.active_weight(conv.weight.shape[0], kernel)
    net.load_state_dict(state)
    return net


def breakdown_models(space: SearchSpace, resolution: int) -> dict[str, torch.nn.Module]:
    """The five models of the breakdown, with the smallest subnet of ``space`` at ``resolution`` active,
    in the order of the module docstring (``static`` first)."""
    arch = space.min_arch(resolution)
    supernet = OFAMobileNetV3(space).train()
    supernet.set_active(arch)
    static = supernet.extract().train()
    exact_space = replace(space, **{name: (min(getattr(space, name)),) for name in ("kernels", "expands", "depths")})
    exact = OFAMobileNetV3(exact_space).train()
    exact.load_state_dict(static.state_dict())
    exact.set_active(exact_space.min_arch(resolution))
    no_transforms = without_transforms(supernet, min(space.kernels))
    no_transforms.set_active(no_transforms.space.min_arch(resolution))
    same_se = with_supernet_se(supernet.extract().train())
    return {"static": static, "same_se": same_se, "exact": exact, "no_transforms": no_transforms, "supernet": supernet}


def add_parts(result: dict[str, object]) -> dict[str, object]:
    """``part_*``: each part's share of the static step, from the median ratios."""
    for part, (having, lacking) in PARTS.items():
        before = 1.0 if lacking is None else result[f"overhead_{lacking}"]
        result[f"part_{part}"] = round(result[f"overhead_{having}"] - before, 3)
    return result


def keep_freed_memory() -> None:
    """Make glibc keep freed memory for reuse (allocations up to 32 MiB from the heap, no trimming); a
    no-op without glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)


def one_invocation(args: argparse.Namespace) -> dict[str, object]:
    keep_freed_memory()
    torch.manual_seed(0)
    models = breakdown_models(SearchSpace.mbv3(), args.resolution)
    x = torch.randn(args.batch, 3, args.resolution, args.resolution)
    y = torch.randint(0, 1000, (args.batch,))
    timed = {name: (model, sgd(model)) for name, model in models.items()}
    result = summarize(*measure_models(timed, (x, y), args.rounds, time.perf_counter))
    result["threads"] = torch.get_num_threads()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    add_timing_arguments(parser, rounds=101, invocations=1)
    args = parser.parse_args(argv)
    check_timing_arguments(parser, args)
    if args.invocations == 1:
        result = one_invocation(args)
    else:
        result = median_of_invocations(
            invocation_command("bench.elastic_breakdown", args), args.invocations, ["threads"]
        )
    report(add_parts(result), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
