"""``ofa noise-scale``: the gradient noise scale of one phase at given weights, without training them.

Each step draws the phase's subnets (from a stream training never draws) and ``accumulate``
micro-batches of the training micro-batch size per process; the small batch is one micro-batch,
the big one all of them over all processes (estimator: `ofa.train.noise_scale`). Estimates are
averaged over the steps. The weights are a run's newest checkpoint or a fresh network.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ofa.data.loaders import LoaderOptions, make_loader, set_loader_epoch
from ofa.train.checkpoint import CheckpointStore
from ofa.train.distributed import all_reduce_sum, average_gradients, process_group
from ofa.train.loop import Trainer
from ofa.train.noise_scale import (
    NoiseScaleEstimator,
    b_simple_log_sd,
    batch_advice,
    grad_sq_norm,
    steps_factor,
    suggest_batch_size,
)
from ofa.train.recipe import Recipe, load_recipe
from ofa.train.sampling import micro_batch_seeds, step_subnets
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label


@dataclass(frozen=True)
class NoiseMeasureConfig:
    """What to measure (``ofa noise-scale``'s options): ``steps`` steps of ``accumulate`` micro-batches, of
    phase ``phase`` (None: the run's current phase, or the first without a run)."""

    steps: int = field(default=20, metadata={"help": "measurement steps"})
    accumulate: int = field(
        default=8, metadata={"help": "micro-batches per step: the big batch is this many training micro-batches"}
    )
    phase: str | None = field(
        default=None, metadata={"help": "phase name (default: the run's current phase, else the first)"}
    )

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise OFAError(f"{field_label(NoiseMeasureConfig, 'steps')}: need at least 1 step, got {self.steps}")
        if self.accumulate < 2:
            raise OFAError(
                f"{field_label(NoiseMeasureConfig, 'accumulate')}: need at least 2 micro-batches (two batch sizes "
                f"to compare), got {self.accumulate}"
            )


@dataclass(frozen=True)
class NoiseScaleResult:
    """B_simple of one phase, the two batch sizes it compares, and the one batch size (and its learning
    rate) to train with, with a line of advice saying why."""

    phase: str
    phase_index: int
    steps: int
    b_small: int
    b_big: int
    b_simple: float | None  # None: |G|² estimate <= 0, the gradient is lost in the noise
    b_simple_log_sd: float | None  # standard error of ln B_simple over the steps (None: not pinned down)
    trace_sigma: float
    grad_sq: float
    updates: int
    current_global_batch: int
    lr: float  # the phase's learning rate at the current global batch
    train_images: int
    suggested_batch: int | None
    suggested_lr: float | None  # the paper's optimal-rate rule ε ∝ 1/(1 + B_simple/B), from ``lr``
    advice: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def measure_noise_scale(
    recipe: Recipe, cfg: NoiseMeasureConfig, state: Mapping[str, Any] | None = None
) -> NoiseScaleResult:
    """B_simple of one phase of ``recipe`` at the weights of training checkpoint ``state`` (None: fresh).

    Under ``torchrun`` every process measures its share. Raises `OFAError` for an unknown phase,
    a checkpoint of another space, or more micro-batches than training images.
    """
    chosen = recipe.phase_index(cfg.phase) if cfg.phase is not None else None
    with process_group(recipe.device) as env:
        trainer = Trainer(recipe, None, env)
        if state is not None:
            trainer.load_state(dict(state))
        pos = trainer.session.pos
        p = chosen if chosen is not None else min(pos.phase, len(recipe.phases) - 1)
        if pos.phase != p or (pos.epoch == 0 and pos.step == 0):
            trainer.begin_phase(p)  # the teacher and channel order the phase would train with
        return measure_phase_noise(trainer, p, cfg)


def measure_noise_scale_file(
    recipe_path: str | Path, cfg: NoiseMeasureConfig, overrides: Sequence[str] = (), run_dir: str | Path | None = None
) -> NoiseScaleResult:
    """`measure_noise_scale` of a recipe file (with ``--set`` overrides) at the newest checkpoint of ``run_dir``."""
    recipe = load_recipe(recipe_path, overrides)
    state = None
    if run_dir is not None:
        state = CheckpointStore(Path(run_dir) / "checkpoints").load_latest()
        if state is None:
            raise OFAError(f"{run_dir}: no checkpoint to measure (checkpoints/ is empty or missing)")
    return measure_noise_scale(recipe, cfg, state)


def measure_phase_noise(trainer: Trainer, p: int, cfg: NoiseMeasureConfig) -> NoiseScaleResult:
    """Phase ``p`` at the trainer's current weights, which it leaves unchanged (no optimizer step: the
    learning rate is zero). The trainer is already set up for the phase (`Trainer.begin_phase`)."""
    r, phase, env, ps, session = trainer.recipe, trainer.recipe.phases[p], trainer.env, trainer.ps, trainer.session
    steps, accumulate = cfg.steps, cfg.accumulate
    b = r.data.batch_size // ps.micro_batches
    loader = make_loader(
        session.data.train,
        b * accumulate,
        shuffle=True,
        seed=r.seed,
        drop_last=True,
        options=LoaderOptions(rank=env.rank, world_size=env.world_size),
    )
    if len(loader) == 0:
        raise OFAError(
            f"noise scale: {accumulate} micro-batches of {b} images x {env.world_size} process(es) "
            f"exceed the {len(session.data.train)} training images; lower --accumulate"
        )
    estimator = NoiseScaleEstimator(ema=1.0)
    b_big = b * accumulate * env.world_size
    batches = _cycle(loader)
    per_step: list[tuple[float, float]] = []
    trainer.net.train()
    for i in tqdm(range(steps), desc=f"noise scale {phase.name}", disable=None if env.is_main else True, leave=False):
        x, y = next(batches)
        # An epoch index past the phase's end: a subnet stream training never draws.
        archs = step_subnets(r.space, phase, ps.inplace, r.seed, p, phase.total_epochs, i)
        seeds = micro_batch_seeds(r.seed, p, phase.total_epochs, i, env.rank, accumulate)
        trainer.net.zero_grad(set_to_none=True)
        _, norms = ps.accumulate_gradients(archs, x, y, seeds, True)
        small = all_reduce_sum(torch.tensor(norms.mean_sq, dtype=torch.float64, device=trainer.device), env)
        average_gradients(ps.params, env)
        scale = ps.scaler.get_scale() if ps.scaler.is_enabled() else 1.0
        per_step.append(estimator.update(float(small) / env.world_size, grad_sq_norm(ps.params, 1.0 / scale), b, b_big))
    trainer.net.zero_grad(set_to_none=True)
    summary = estimator.summary()
    b_simple, images = summary["b_simple"], len(session.data.train)
    now, lr = session.global_batch, phase.lr * session.lr_scale
    suggested = suggest_batch_size(b_simple, images)
    return NoiseScaleResult(
        phase=phase.name,
        phase_index=p,
        steps=steps,
        b_small=b,
        b_big=b_big,
        **summary,
        b_simple_log_sd=_finite(b_simple_log_sd([g for g, _ in per_step], [t for _, t in per_step])),
        current_global_batch=now,
        lr=lr,
        train_images=images,
        suggested_batch=suggested,
        suggested_lr=None if suggested is None else lr * steps_factor(now, suggested, b_simple),
        advice=batch_advice(now, b_simple, images),
    )


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _cycle(loader: torch.utils.data.DataLoader) -> Iterator[Any]:
    epoch = 0
    while True:
        set_loader_epoch(loader, epoch)
        yield from loader
        epoch += 1
