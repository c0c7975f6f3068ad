"""Which subnets train at each step, and which are evaluated: pure functions of the recipe and position.

Sampling is seeded by (seed, phase, epoch, step), so every rank draws the same subnets and a
resumed run draws what the uninterrupted one would have.
"""

from __future__ import annotations

import itertools

import numpy as np

from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.encoding import sample_arch
from ofa.families.mbv3.space import SearchSpace
from ofa.train.recipe import PhaseConfig


def step_subnets(
    space: SearchSpace, phase: PhaseConfig, inplace_teacher: bool, seed: int, phase_index: int, epoch: int, step: int
) -> list[Arch]:
    """The subnets of one step, all at one resolution drawn from the phase's list.

    The sandwich rule puts the largest and the smallest subnet first; in-place distillation puts
    the largest first (it teaches the others); the rest are uniform samples of the phase's choices.
    """
    rng = np.random.default_rng([seed, phase_index, epoch, step])
    res = int(rng.choice(phase.resolutions))
    fixed: list[Arch] = []
    if phase.sandwich or inplace_teacher:
        fixed.append(phase.largest(res, space))
    if phase.sandwich:
        fixed.append(phase.smallest(res, space))
    fixed = fixed[: phase.subnets_per_step]
    return fixed + [
        sample_arch(space, rng, kernels=phase.kernels, expands=phase.expands, depths=phase.depths, resolutions=[res])
        for _ in range(phase.subnets_per_step - len(fixed))
    ]


def step_seed(seed: int, phase_index: int, epoch: int, step: int, rank: int) -> int:
    """Seed of torch's RNG (dropout) for one step of one rank."""
    return int(np.random.default_rng([seed, phase_index, epoch, step, rank, 7]).integers(2**63 - 1))


def eval_subnets(space: SearchSpace, phase: PhaseConfig, mode: str) -> dict[str, Arch]:
    """Named subnets to evaluate: the corners (min/max of each dimension at min/max resolution).

    ``minmax`` keeps only the largest and smallest. Duplicates (a dimension with one choice) are
    dropped; names read ``r16-k5-e4-d3``.
    """
    resolutions = sorted({min(phase.resolutions), max(phase.resolutions)})
    if mode == "minmax":
        archs = [phase.largest(max(resolutions), space), phase.smallest(min(resolutions), space)]
    else:
        archs = []
        for r, d, e, k in itertools.product(
            resolutions[::-1],
            *[sorted({max(c), min(c)}, reverse=True) for c in (phase.depths, phase.expands, phase.kernels)],
        ):
            archs.append(space.uniform_arch(r, k, e, d))
    named: dict[str, Arch] = {}
    for a in archs:
        named.setdefault(f"r{a.resolution}-k{a.kernels[0]}-e{a.expands[0]}-d{a.depths[0]}", a)
    return named
