"""Which subnets train at each step, and which are evaluated: pure functions of the recipe and position.

Sampling is seeded by (seed, phase, epoch, step), so every rank draws the same subnets and a
resumed run draws what the uninterrupted one would have.
"""

from __future__ import annotations

import itertools

import numpy as np

from ofa.families.family import Arch, Space
from ofa.families.registry import family_of, layout_of
from ofa.train.recipe import PhaseConfig


def step_subnets(
    space: Space, phase: PhaseConfig, inplace_teacher: bool, seed: int, phase_index: int, epoch: int, step: int
) -> list[Arch]:
    """The subnets of one step, at one resolution drawn from the phase's list.

    The sandwich rule puts the largest and the smallest subnet first (with ``corner_resolutions``, at the
    phase's largest and smallest resolution); in-place distillation puts the largest first (it teaches the
    others); the rest are uniform samples of the phase's choices.
    """
    rng = np.random.default_rng([seed, phase_index, epoch, step])
    res = int(rng.choice(phase.resolutions))
    restrict = {dim: c for dim, c in phase.choices.items() if dim != "resolutions"}
    sample = family_of(space).sample_arch
    high, low = (max(phase.resolutions), min(phase.resolutions)) if phase.corner_resolutions else (res, res)
    fixed: list[Arch] = []
    if phase.sandwich or inplace_teacher:
        fixed.append(phase.largest(high, space))
    if phase.sandwich:
        fixed.append(phase.smallest(low, space))
    fixed = fixed[: phase.subnets_per_step]
    return fixed + [
        sample(space, rng, **restrict, resolutions=[res]) for _ in range(phase.subnets_per_step - len(fixed))
    ]


def step_seed(seed: int, phase_index: int, epoch: int, step: int, stream: int) -> int:
    """Seed of torch's RNG (dropout) for one stream of one step: a micro-batch of the global batch."""
    return int(np.random.default_rng([seed, phase_index, epoch, step, stream, 7]).integers(2**63 - 1))


def micro_batch_seeds(seed: int, phase_index: int, epoch: int, step: int, rank: int, micro_batches: int) -> list[int]:
    """Dropout seeds of this rank's micro-batches, each by its place in the global batch (rank-major, as the
    loaders cut it): one process with the global batch in 2 micro-batches draws the masks that 2 ranks with one
    each draw, so a run's weights do not depend on how its batch is spread over processes."""
    first = rank * micro_batches
    return [step_seed(seed, phase_index, epoch, step, first + m) for m in range(micro_batches)]


def eval_subnets(space: Space, phase: PhaseConfig, mode: str) -> dict[str, Arch]:
    """Named subnets to evaluate: the corners (min/max of each dimension at min/max resolution).

    ``minmax`` keeps only the largest and smallest. Duplicates (a dimension with one choice) are
    dropped; names read ``r16-k5-e4-d3``.
    """
    resolutions = sorted({min(phase.resolutions), max(phase.resolutions)})
    dims = [dim for dim in phase.choices if dim != "resolutions"]
    if mode == "minmax":
        corners = [(max(resolutions), {d: max(phase.choices[d]) for d in dims})]
        corners.append((min(resolutions), {d: min(phase.choices[d]) for d in dims}))
    else:
        ends = [sorted({max(phase.choices[d]), min(phase.choices[d])}, reverse=True) for d in reversed(dims)]
        corners = [(r, dict(zip(reversed(dims), v))) for r, *v in itertools.product(resolutions[::-1], *ends)]
    layout, named = layout_of(space), {}
    for r, values in corners:
        name = "-".join([f"r{r}", *(f"{d[0]}{values[d]}" for d in dims)])
        named.setdefault(name, layout.uniform(r, values))
    return named
