"""Training recipes: YAML in, a validated `Recipe` out, before any work starts.

Sections: ``space`` (the search space), ``data``, ``optimizer``, ``schedule``, ``distill``,
``phases`` (progressive shrinking, in order), ``eval``, ``checkpoint``, ``noise_scale``, ``logging``, plus the
top-level ``seed``, ``device``, ``amp`` and ``channels_last``. An unknown key, a wrong type, a
choice outside the space or a missing data root is an `OFAError` naming the file and the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ofa.data.config import DataConfig, parse_data_config
from ofa.families.family import Arch, Space
from ofa.families.registry import family_of, layout_of, read_supernet_space, space_from_dict
from ofa.train.pipeline_settings import PipelineSettings
from ofa.utils.config import (
    ConfigError,
    apply_overrides,
    parse_fields,
    parse_section,
    recipe_to_dict,
    section_to_dict,
    without_later_defaults,
)
from ofa.utils.errors import OFAError, SpaceError
from ofa.utils.io import read_yaml
from ofa.utils.tracking import LoggingConfig


@dataclass(frozen=True)
class OptimizerConfig:
    name: Literal["sgd", "adamw"] = "sgd"
    momentum: float = 0.9
    nesterov: bool = True
    betas: tuple[float, ...] = (0.9, 0.999)
    weight_decay: float = 3e-5
    no_decay_bn_bias: bool = True
    label_smoothing: float = 0.1
    grad_clip: float | None = None
    # Phase learning rates are for this global batch; the trainer scales them linearly to the
    # actual one (batch_size x processes). null: use them as given.
    lr_reference_batch: int | None = None
    # all: every weight with a gradient is updated (the paper's rule: unused channels drift with their
    # momentum and decay); used: SGD updates only what the step's subnets used (ofa.train.used_sgd).
    update: Literal["all", "used"] = "all"

    def to_dict(self) -> dict[str, Any]:
        """The section as a recipe holds it, ``LATER_OPTIMIZER_KEYS`` left out at their defaults."""
        return without_later_defaults(section_to_dict(self), OptimizerConfig, LATER_OPTIMIZER_KEYS)


LATER_OPTIMIZER_KEYS = ("update",)  # OptimizerConfig keys newer than cached runs


@dataclass(frozen=True)
class ScheduleConfig:
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    min_lr: float = 0.0
    micro_batches: int = 1  # each batch is split into this many gradient-accumulation chunks


@dataclass(frozen=True)
class DistillConfig:
    # none; full: a frozen copy of the network at the end of `teacher_phase` (default: the
    # first phase) teaches every later phase; inplace: each step's largest subnet teaches the others;
    # init: the init.supernet as loaded (its full network) teaches every phase.
    teacher: Literal["none", "full", "inplace", "init"] = "none"
    ratio: float = 1.0
    temperature: float = 1.0
    teacher_phase: str | None = None


@dataclass(frozen=True)
class PhaseConfig:
    """One progressive-shrinking phase. ``choices`` holds the choices it trains of each of the space's
    elastic dimensions (``space.elastic_dims()``), which a recipe gives as keys of the phase (null or
    omitted: all of the space's)."""

    name: str
    epochs: int
    lr: float
    warmup_epochs: int = 0
    subnets_per_step: int = 1
    sandwich: bool = False  # largest + smallest + random subnets each step
    # With the sandwich: the largest subnet at the phase's largest resolution and the smallest at its smallest
    # every step (BigNAS), the random ones at the step's drawn resolution; else all at the drawn one (the paper).
    corner_resolutions: bool = False
    reorganize_channels: bool = False  # sort expanded channels by importance before the phase
    choices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def total_epochs(self) -> int:
        return self.warmup_epochs + self.epochs

    @property
    def resolutions(self) -> tuple[int, ...]:
        return self.choices["resolutions"]

    def to_dict(self) -> dict[str, Any]:
        """The phase as a recipe writes it: each dimension a key of its own, after ``warmup_epochs``;
        ``LATER_PHASE_KEYS`` left out at their defaults."""
        plain = without_later_defaults(
            section_to_dict(dataclasses.replace(self, choices={})), PhaseConfig, LATER_PHASE_KEYS
        )
        plain.pop("choices")
        head = list(plain.items())[:4]
        return {**dict(head), **section_to_dict(dict(self.choices)), **plain}

    def uniform(self, resolution: int, space: Space, pick: Callable[[Sequence[int]], int]) -> Arch:
        """The subnet taking ``pick`` of the phase's choices in every dimension, at ``resolution``."""
        values = {dim: pick(c) for dim, c in self.choices.items() if dim != "resolutions"}
        return layout_of(space).uniform(resolution, values)

    def largest(self, resolution: int, space: Space) -> Arch:
        return self.uniform(resolution, space, max)

    def smallest(self, resolution: int, space: Space) -> Arch:
        return self.uniform(resolution, space, min)


LATER_PHASE_KEYS = ("corner_resolutions",)  # PhaseConfig keys newer than cached runs


@dataclass(frozen=True)
class InitConfig:
    # Start from this supernet file (`ofa import`, `ofa train` or a training checkpoint) instead of
    # random weights. Its space is the recipe's; a `space` section may then only change
    # num_classes (fresh classifier), in_channels (stem's RGB weights folded), resolutions, dropout.
    supernet: str | None = None


@dataclass(frozen=True)
class EvalConfig:
    every: int = 0  # also evaluate every N epochs inside a phase (0: at phase ends only)
    calib_batches: int = 10  # training batches for BN recalibration of each evaluated subnet
    subnets: Literal["corners", "minmax"] = "corners"  # min/max of every dimension, or only both ends


@dataclass(frozen=True)
class CheckpointConfig:
    every_steps: int = 0  # also checkpoint every N optimizer steps (0: at epoch ends only)
    keep: int = 2  # newest checkpoints kept (>= 2: a damaged latest one always has a predecessor)
    safetensors: bool = False  # also write supernet.safetensors (weights + JSON header, no pickle)


@dataclass(frozen=True)
class NoiseScaleConfig:
    enabled: bool = True  # needs micro_batches x processes >= 2 (two batch sizes to compare)
    ema: float = 0.95


@dataclass(frozen=True)
class Recipe:
    """A validated recipe; ``to_dict()`` is the resolved recipe (every default spelled out)."""

    space: Space
    phases: tuple[PhaseConfig, ...]
    data: DataConfig = field(default_factory=DataConfig)
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = True  # mixed precision, CUDA only
    channels_last: bool = True  # CUDA only
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    noise_scale: NoiseScaleConfig = field(default_factory=NoiseScaleConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    init: InitConfig = field(default_factory=InitConfig)
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    source: str = field(default="recipe", compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = recipe_to_dict(self, own=("space", "data", "optimizer"))
        return {**out, "phases": [p.to_dict() for p in self.phases]}

    def training_dict(self) -> dict[str, Any]:
        """What determines the trained weights: every section but ``pipeline:`` (what is done after training)."""
        return {k: v for k, v in self.to_dict().items() if k != "pipeline"}

    def phase_index(self, name: str) -> int:
        for i, p in enumerate(self.phases):
            if p.name == name:
                return i
        raise OFAError(f"{self.source}: no phase named {name!r} (phases: {', '.join(p.name for p in self.phases)})")

    @property
    def teacher_phase_index(self) -> int | None:
        """Index of the phase whose final weights become the frozen teacher (distill.teacher: full)."""
        if self.distill.teacher == "init":
            return -1  # before the first phase: the supernet as loaded
        if self.distill.teacher != "full":
            return None
        return self.phase_index(self.distill.teacher_phase) if self.distill.teacher_phase else 0


def load_recipe(path: str | Path, overrides: Sequence[str] = ()) -> Recipe:
    """Read, override (``key.sub=value``), and validate a recipe file."""
    raw = read_yaml(path, "recipe")
    if not isinstance(raw, Mapping):
        raise OFAError(f"{path}: a recipe is a mapping with space, data, phases, ... (got {type(raw).__name__})")
    raw = apply_overrides(dict(raw), overrides, str(path))
    return recipe_from_dict(raw, str(path))


def recipe_from_dict(raw: Mapping[str, Any], source: str = "recipe") -> Recipe:
    """Validate a recipe mapping; errors read ``SOURCE: key.path: problem``."""
    try:
        return _validate(raw, source)
    except (ConfigError, SpaceError) as exc:
        raise OFAError(f"{source}: {exc}") from None


def _validate(raw: Mapping[str, Any], source: str) -> Recipe:
    allowed = [f.name for f in dataclasses.fields(Recipe) if f.name != "source"]
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{key}: unknown key (allowed: {', '.join(allowed)})")
    init = parse_section(InitConfig, raw.get("init"), "init")
    for key in ("space", "phases"):
        if key not in raw and not (key == "space" and init.supernet):
            raise ConfigError(f"{key}: missing (required)")
    space = _init_space(init, raw, source) if init.supernet else space_from_dict(raw["space"], "space")
    data = parse_data_config(raw.get("data"), "data")
    if not isinstance(raw["phases"], list) or not raw["phases"]:
        raise ConfigError("phases: expected a non-empty list of phases")
    phases = tuple(_phase(space, p, f"phases[{i}]") for i, p in enumerate(raw["phases"]))
    # The other sections and the top-level scalars are checked against Recipe's own annotations.
    rest = {k: v for k, v in raw.items() if k not in ("space", "data", "phases")}
    kwargs = parse_fields(Recipe, rest, "", skip=("space", "data", "phases", "source"))
    recipe = Recipe(space=space, phases=phases, data=data, source=source, **kwargs)
    _check_consistency(recipe)
    return recipe


def _init_space(init: InitConfig, raw: Mapping[str, Any], source: str) -> Space:
    """The init supernet's space, with the recipe's allowed changes; a re-headed one cannot teach."""
    base = read_supernet_space(init.supernet)
    space = family_of(base).derive_space(base, raw.get("space"), "space")
    distill = raw.get("distill")
    if isinstance(distill, Mapping) and distill.get("teacher") == "init" and space.num_classes != base.num_classes:
        raise ConfigError(
            f"distill.teacher: init: {init.supernet} is re-headed ({base.num_classes} -> "
            f"{space.num_classes} classes), so it cannot teach until the whole supernet is fine-tuned "
            "(use teacher: full after a first full-network phase)"
        )
    return space


def _phase(space: Space, raw: Any, where: str) -> PhaseConfig:
    dims = space.elastic_dims()
    given = {k: v for k, v in raw.items() if k in dims} if isinstance(raw, Mapping) else {}
    rest = {k: v for k, v in raw.items() if k not in dims} if isinstance(raw, Mapping) else raw
    phase = PhaseConfig(**parse_fields(PhaseConfig, rest, where, skip=("choices",)))
    resolved = {}
    for name, allowed in dims.items():
        chosen = _choice_list(given.get(name), f"{where}.{name}")
        if chosen is None:
            resolved[name] = tuple(allowed)
            continue
        if not chosen:
            raise ConfigError(f"{where}.{name}: needs at least one choice (or null for all of space.{name})")
        for i, v in enumerate(chosen):
            if v not in allowed:
                raise ConfigError(f"{where}.{name}[{i}]: {v} is not one of space.{name} {list(allowed)}")
        resolved[name] = tuple(sorted({allowed[list(allowed).index(v)] for v in chosen}))  # the space's values
    phase = dataclasses.replace(phase, choices=resolved)
    if phase.epochs < 1:
        raise ConfigError(f"{where}.epochs: must be >= 1, got {phase.epochs}")
    if phase.warmup_epochs < 0:
        raise ConfigError(f"{where}.warmup_epochs: must be >= 0, got {phase.warmup_epochs}")
    if phase.lr <= 0:
        raise ConfigError(f"{where}.lr: must be positive, got {phase.lr}")
    if phase.subnets_per_step < 1:
        raise ConfigError(f"{where}.subnets_per_step: must be >= 1, got {phase.subnets_per_step}")
    if phase.sandwich and phase.subnets_per_step < 2:
        raise ConfigError(f"{where}.sandwich: needs subnets_per_step >= 2 (largest + smallest)")
    if phase.corner_resolutions and not phase.sandwich:
        raise ConfigError(f"{where}.corner_resolutions: needs sandwich: true (it places the sandwich's corners)")
    return phase


def _choice_list(value: Any, where: str) -> tuple[int | float, ...] | None:
    """A phase's choices of one dimension: numbers (expand ratios may be fractions), checked by the caller."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or any(isinstance(v, bool) or not isinstance(v, int | float) for v in value):
        raise ConfigError(f"{where}: expected a list of numbers, got {value!r}")
    return tuple(value)


def _check_consistency(r: Recipe) -> None:
    names = [p.name for p in r.phases]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"phases[{i}].name: {name!r} is used twice")
    if r.data.image_size < max(r.space.resolutions):
        raise ConfigError(
            f"data.image_size: {r.data.image_size} is smaller than the largest resolution "
            f"{max(r.space.resolutions)} (space.resolutions)"
        )
    if r.data.name == "digits" and (r.space.num_classes, r.space.in_channels) != (10, 1):
        raise ConfigError(
            "space.num_classes: digits has 10 classes of 1-channel images (space.num_classes: 10, space.in_channels: 1)"
        )
    if r.data.name == "synthetic":
        syn = r.data.synthetic
        if syn.num_classes != r.space.num_classes:
            raise ConfigError(
                f"space.num_classes: {r.space.num_classes} but data.synthetic.num_classes is {syn.num_classes}"
            )
        if syn.channels != r.space.in_channels:
            raise ConfigError(f"space.in_channels: {r.space.in_channels} but data.synthetic.channels is {syn.channels}")
    _check_training(r, names)


def _check_training(r: Recipe, names: list[str]) -> None:
    """Optimizer, schedule, distillation, evaluation and checkpoint settings that only make sense together."""
    micro = r.schedule.micro_batches
    if micro < 1 or r.data.batch_size % micro:
        raise ConfigError(
            f"schedule.micro_batches: {micro} must be >= 1 and divide data.batch_size ({r.data.batch_size})"
        )
    if r.optimizer.name == "sgd" and r.optimizer.nesterov and r.optimizer.momentum <= 0:
        raise ConfigError("optimizer.nesterov: Nesterov momentum needs optimizer.momentum > 0")
    if r.optimizer.update == "used" and r.optimizer.name != "sgd":
        raise ConfigError(f"optimizer.update: used is for sgd (got optimizer.name: {r.optimizer.name})")
    if r.optimizer.grad_clip is not None and r.optimizer.grad_clip <= 0:
        raise ConfigError(f"optimizer.grad_clip: must be positive or null, got {r.optimizer.grad_clip}")
    if r.optimizer.lr_reference_batch is not None and r.optimizer.lr_reference_batch < 1:
        raise ConfigError("optimizer.lr_reference_batch: must be a positive batch size or null")
    if not 0 <= r.optimizer.label_smoothing < 1:
        raise ConfigError(f"optimizer.label_smoothing: must be in [0, 1), got {r.optimizer.label_smoothing}")
    if r.distill.ratio < 0 or r.distill.temperature <= 0:
        raise ConfigError("distill.ratio: must be >= 0, and distill.temperature > 0")
    if r.distill.teacher_phase is not None:
        if r.distill.teacher_phase not in names:
            raise ConfigError(
                f"distill.teacher_phase: {r.distill.teacher_phase!r} is not a phase name ({', '.join(names)})"
            )
        if r.distill.teacher != "full":
            raise ConfigError("distill.teacher_phase: only used with distill.teacher: full")
    if r.distill.teacher == "init" and not r.init.supernet:
        raise ConfigError("distill.teacher: init needs init.supernet (the supernet the run starts from)")
    if r.distill.teacher == "inplace":
        for i, p in enumerate(r.phases):
            multiple = p.largest(p.resolutions[0], r.space) != p.smallest(p.resolutions[0], r.space)
            if multiple and p.subnets_per_step < 2:
                raise ConfigError(
                    f"phases[{i}].subnets_per_step: in-place distillation needs >= 2 (the largest "
                    "subnet teaches the others)"
                )
    if not 0 < r.noise_scale.ema <= 1:
        raise ConfigError(f"noise_scale.ema: must be in (0, 1], got {r.noise_scale.ema}")
    if r.eval.every < 0 or r.eval.calib_batches < 1:
        raise ConfigError("eval.every: must be >= 0, and eval.calib_batches >= 1")
    if r.checkpoint.every_steps < 0:
        raise ConfigError(f"checkpoint.every_steps: must be >= 0, got {r.checkpoint.every_steps}")
    if r.checkpoint.keep < 2:
        raise ConfigError(
            f"checkpoint.keep: must be >= 2 (a damaged latest checkpoint needs a predecessor), got {r.checkpoint.keep}"
        )
