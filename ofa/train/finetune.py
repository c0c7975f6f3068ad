"""Fine-tune one subnet as an ordinary timm model (the official "finetune@25" step), resumably.

The subnet is extracted from the supernet once and trained like any network: cross-entropy (plus,
optionally, distillation from the supernet's largest subnet), warmup + cosine schedule. The set-up
is the shared `TrainingSession` (data, loaders, lr scaling, ``metrics.jsonl`` and the ``logging``
sinks such as TensorBoard, checkpoints), so only the step and the rows are this module's. Every
source of randomness is a function of (seed, epoch, step), and the checkpoint holds the weights,
the optimizer and the position, so a run killed at any point resumes to the same bits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from ofa.data.config import DataConfig, parse_data_config
from ofa.families.family import Arch, Space, Supernet
from ofa.families.registry import arch_from_any, load_supernet
from ofa.families.subnet_file import save_subnet
from ofa.train.bn import resize
from ofa.train.distill import frozen_teacher, soft_cross_entropy
from ofa.train.distributed import DistEnv, resolve_device
from ofa.train.evaluate import evaluate
from ofa.train.recipe import CheckpointConfig, OptimizerConfig, PhaseConfig, ScheduleConfig
from ofa.train.resume import prepare_run_folder
from ofa.train.sampling import step_seed
from ofa.train.session import SessionConfig, TrainingSession, apply_gradients
from ofa.utils.config import ConfigError, apply_overrides, parse_fields, recipe_to_dict
from ofa.utils.errors import OFAError, SpaceError
from ofa.utils.io import file_sha256, read_json, read_yaml
from ofa.utils.tracking import LoggingConfig


@dataclass(frozen=True)
class FinetuneDistill:
    teacher: Literal["none", "supernet"] = "none"  # supernet: its largest subnet (frozen) teaches
    ratio: float = 1.0
    temperature: float = 1.0


@dataclass(frozen=True)
class FinetuneRecipe:
    """What ``ofa finetune`` reads: train-recipe sections (data, optimizer, checkpoint, logging) and one schedule."""

    epochs: int
    lr: float
    warmup_epochs: int = 0
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    min_lr: float = 0.0
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    distill: FinetuneDistill = field(default_factory=FinetuneDistill)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    source: str = field(default="recipe", compare=False)

    def __post_init__(self) -> None:
        checks = (
            (self.epochs >= 1, "epochs: must be >= 1"),
            (self.lr > 0, "lr: must be positive"),
            (self.warmup_epochs >= 0, "warmup_epochs: must be >= 0"),
            (
                self.distill.ratio >= 0 and self.distill.temperature > 0,
                "distill.ratio: must be >= 0, and distill.temperature > 0",
            ),
            (
                self.checkpoint.every_steps >= 0 and self.checkpoint.keep >= 2,
                "checkpoint.every_steps: must be >= 0, and checkpoint.keep >= 2",
            ),
        )
        bad = next((why for ok, why in checks if not ok), None)
        if bad:
            raise OFAError(f"{self.source}: {bad}")

    @property
    def phase(self) -> PhaseConfig:
        """The schedule as a one-phase `PhaseConfig` (for `lr_at`)."""
        return PhaseConfig(name="finetune", epochs=self.epochs, lr=self.lr, warmup_epochs=self.warmup_epochs)

    @property
    def schedule(self) -> ScheduleConfig:
        return ScheduleConfig(lr_schedule=self.lr_schedule, min_lr=self.min_lr)

    def to_dict(self) -> dict[str, Any]:
        return recipe_to_dict(self, own=("optimizer",))


def load_finetune_recipe(path: str | Path, overrides: Sequence[str] = ()) -> FinetuneRecipe:
    """Read, override (``--set key=value``) and validate a fine-tuning recipe."""
    raw = read_yaml(path, "recipe")
    if not isinstance(raw, Mapping):
        raise OFAError(f"{path}: a fine-tuning recipe is a mapping with epochs, lr, data, ...")
    raw = apply_overrides(dict(raw), overrides, str(path))
    try:
        kwargs = parse_fields(
            FinetuneRecipe, {k: v for k, v in raw.items() if k != "data"}, "", skip=("data", "source")
        )
        return FinetuneRecipe(data=parse_data_config(raw.get("data"), "data"), source=str(path), **kwargs)
    except (ConfigError, SpaceError) as exc:
        raise OFAError(f"{path}: {exc}") from None


def load_arch_any(space: Space, path: str | Path) -> Arch:
    """An arch JSON of ours, or an official subnet config of ``space``'s family (mbv3: ``{"ks", "e", "d", "r"}``)."""
    return arch_from_any(space, read_json(path, "arch file"), str(path))


@dataclass(frozen=True)
class FinetuneResult:
    subnet_path: Path
    arch: Arch
    val_top1: float
    test_top1: float
    epochs: int


def finetune(
    supernet: Supernet, arch: Arch, recipe: FinetuneRecipe, out_dir: str | Path, resume: bool = False
) -> FinetuneResult:
    """Train subnet ``arch`` of ``supernet`` on the recipe's data into ``out_dir`` (``subnet.pt``)."""
    out = Path(out_dir)
    supernet.space.validate(arch, "--arch")
    if recipe.distill.teacher == "supernet" and supernet.meta.get("fresh_classifier"):
        raise OFAError(
            "distill.teacher: supernet: this supernet was re-headed and its classifier is untrained, so it "
            "cannot teach until the whole supernet is fine-tuned (`ofa train` with init.supernet)"
        )
    prepare_run_folder(out, resume, product="subnet.pt", run="fine-tuning run")
    return _Finetuner(supernet, arch, recipe, out).run(resume)


def finetune_files(
    supernet_path: str | Path,
    arch_path: str | Path,
    recipe_path: str | Path,
    out_dir: str | Path,
    resume: bool = False,
    overrides: Sequence[str] = (),
) -> FinetuneResult:
    """`finetune` from files (what the CLI calls)."""
    recipe = load_finetune_recipe(recipe_path, overrides)
    supernet = load_supernet(supernet_path)
    supernet.meta = {**supernet.meta, "supernet_sha256": file_sha256(supernet_path)}
    return finetune(supernet, load_arch_any(supernet.space, arch_path), recipe, out_dir, resume)


class _Finetuner:
    """One fine-tuning run: its session (data, optimizer, records, position), the subnet and its teacher."""

    def __init__(self, supernet: Supernet, arch: Arch, recipe: FinetuneRecipe, out: Path) -> None:
        self.recipe, self.arch, self.space = recipe, arch, supernet.space
        env = DistEnv.single_process(resolve_device(recipe.device))
        self.device = env.device
        self.session = TrainingSession(SessionConfig.of(recipe), env, out)
        self.session.require_fit(
            self.space,
            "the supernet's {key} is {have} but the {data} data has {want}: re-head it first "
            "(`ofa import --num-classes/--in-channels` or a recipe's init.supernet)",
        )
        self.model = supernet.extract(arch).to(self.device).train()
        self.teacher = frozen_teacher(supernet).to(self.device) if recipe.distill.teacher == "supernet" else None
        self.optimizer = self.session.new_optimizer(self.model, recipe.lr)
        self.meta = {**self.session.meta, "supernet_sha256": supernet.meta.get("supernet_sha256"), "finetuned": True}

    def run(self, resume: bool) -> FinetuneResult:
        s, epochs = self.session, self.recipe.epochs
        val = math.nan
        with s.opened(resume, self._load):
            for epoch in range(s.pos.epoch, epochs):
                self.model.train()
                s.run_epoch(epoch, f"finetune {epoch + 1}/{epochs}", partial(self._train_step, epoch), self._save)
                val = evaluate(self.model, s.val_loader, self.arch.resolution, self.device)["top1"]
                loss = s.pos.mean_loss
                row = {"kind": "epoch", "epoch": epoch + 1, "step": s.pos.global_step, "lr": s.last_lr, "loss": loss}
                s.metrics.write({**row, "val_top1": val})
                s.log(f"finetune epoch {epoch + 1}/{epochs}: loss {loss:.4f}, val top-1 {val:.2f}%")
                s.next_epoch()
                self._save()
            return self._finish(val)

    def _train_step(self, epoch: int, step: int, x: torch.Tensor, y: torch.Tensor) -> float:
        r = self.recipe
        torch.manual_seed(step_seed(r.seed, 0, epoch, step, 0))  # dropout
        self.session.schedule_lr(self.optimizer, r.phase, r.schedule, epoch, step)
        x, y = resize(x.to(self.device), self.arch.resolution), y.to(self.device)
        logits = self.model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=r.optimizer.label_smoothing)
        if self.teacher is not None and r.distill.ratio > 0:
            with torch.no_grad():
                soft = self.teacher(x)
            loss = loss + r.distill.ratio * soft_cross_entropy(logits, soft, r.distill.temperature)
        if not math.isfinite(float(loss)):
            raise OFAError(f"loss became {float(loss)} in epoch {epoch + 1}, step {step + 1}: stopped; lower lr")
        apply_gradients(loss, self.model, self.optimizer, r.optimizer.grad_clip)
        return float(loss)

    # ------------------------------------------------------------------ files
    def _save(self) -> None:
        self.session.save(
            {
                "kind": "finetune",
                "space": self.space.to_dict(),
                "arch": self.arch.to_dict(),
                "meta": self.meta,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
            }
        )

    def _load(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "finetune" or state.get("arch") != self.arch.to_dict():
            raise OFAError(
                f"{self.session.store.folder}: its checkpoints are not of a fine-tuning run of this arch; "
                "resume with the --arch the run started with, or choose another --out"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.session.restore(state)

    def _finish(self, val: float) -> FinetuneResult:
        s = self.session
        start = time.perf_counter()
        test = evaluate(self.model, s.test_loader, self.arch.resolution, self.device)["top1"]
        seconds = time.perf_counter() - start
        s.metrics.write(
            {"kind": "test", "step": s.pos.global_step, "test_top1": test, "val_top1": val, "seconds": seconds}
        )
        self.model.eval().cpu()
        path = save_subnet(
            self.model,
            self.space,
            self.arch,
            s.out / "subnet.pt",
            meta={**self.meta, "test_top1": test, "val_top1": val},
        )
        s.log(f"test top-1 {test:.2f}% ({self.arch.short()}); subnet: {path}")
        return FinetuneResult(path, self.arch, val, test, self.recipe.epochs)
