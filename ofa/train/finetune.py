"""Fine-tune one subnet as an ordinary timm model (the official "finetune@25" step), resumably.

The subnet is extracted from the supernet once and trained like any network: cross-entropy (plus,
optionally, distillation from the supernet's largest subnet), warmup + cosine schedule. Every
source of randomness is a function of (seed, epoch, step), and the checkpoint holds the weights,
the optimizer and the position, so a run killed at any point resumes to the same bits.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ofa.data.config import DataConfig, parse_data_config
from ofa.data.datasets import DataBundle, build_data
from ofa.data.loaders import make_loader, set_loader_epoch
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.subnet import save_subnet
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.train.bn import resize
from ofa.train.checkpoint import CheckpointStore
from ofa.train.distill import frozen_teacher, soft_cross_entropy
from ofa.train.evaluate import evaluate
from ofa.train.optim import build_optimizer, lr_at, set_lr
from ofa.train.recipe import CheckpointConfig, OptimizerConfig, PhaseConfig, ScheduleConfig
from ofa.train.sampling import step_seed
from ofa.utils.config import ConfigError, apply_overrides, parse_fields, section_to_dict
from ofa.utils.errors import OFAError, SpaceError
from ofa.utils.io import file_sha256, read_json, read_yaml, write_yaml


@dataclass(frozen=True)
class FinetuneDistill:
    teacher: Literal["none", "supernet"] = "none"  # supernet: its largest subnet (frozen) teaches
    ratio: float = 1.0
    temperature: float = 1.0


@dataclass(frozen=True)
class FinetuneRecipe:
    """What ``ofa finetune`` reads: train-recipe sections (data, optimizer, checkpoint) and one schedule."""

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

    def to_dict(self) -> dict[str, Any]:
        return {f.name: section_to_dict(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "source"}


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


def load_arch_any(path: str | Path) -> Arch:
    """An arch JSON of ours, or an official subnet config ``{"ks", "e", "d", "r"}``."""
    obj = read_json(path, "arch file")
    if isinstance(obj, Mapping) and "ks" in obj:
        return Arch.from_ofa_config(obj, source=str(path))
    return Arch.from_dict(obj, str(path))


@dataclass(frozen=True)
class FinetuneResult:
    subnet_path: Path
    arch: Arch
    val_top1: float
    test_top1: float
    epochs: int


def finetune(
    supernet: OFAMobileNetV3, arch: Arch, recipe: FinetuneRecipe, out_dir: str | Path, resume: bool = False
) -> FinetuneResult:
    """Train subnet ``arch`` of ``supernet`` on the recipe's data into ``out_dir`` (``subnet.pt``)."""
    out = Path(out_dir)
    store = CheckpointStore(out / "checkpoints", recipe.checkpoint.keep)
    if not resume and (store.paths() or (out / "subnet.pt").exists()):
        raise OFAError(f"{out}: already holds a fine-tuning run; pass --resume to continue it or choose another --out")
    supernet.space.validate(arch, "--arch")
    if recipe.distill.teacher == "supernet" and supernet.meta.get("fresh_classifier"):
        raise OFAError(
            "distill.teacher: supernet: this supernet was re-headed and its classifier is untrained, so it "
            "cannot teach until the whole supernet is fine-tuned (`ofa train` with init.supernet)"
        )
    return _Finetuner(supernet, arch, recipe, out, store).run(resume)


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
    supernet = OFAMobileNetV3.load(supernet_path)
    supernet.meta = {**supernet.meta, "supernet_sha256": file_sha256(supernet_path)}
    return finetune(supernet, load_arch_any(arch_path), recipe, out_dir, resume)


class _Finetuner:
    """State and steps of one fine-tuning run: the position (epoch, step) plus weights and optimizer."""

    def __init__(
        self, supernet: OFAMobileNetV3, arch: Arch, recipe: FinetuneRecipe, out: Path, store: CheckpointStore
    ) -> None:
        self.recipe, self.arch, self.out, self.store = recipe, arch, out, store
        auto = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(auto if recipe.device == "auto" else recipe.device)
        self.space = supernet.space
        self.data: DataBundle = build_data(recipe.data)
        for key, have, want in (
            ("num_classes", self.space.num_classes, self.data.num_classes),
            ("in_channels", self.space.in_channels, self.data.in_channels),
        ):
            if have != want:
                raise OFAError(
                    f"the supernet's {key} is {have} but the {recipe.data.name} data has {want}: re-head "
                    "it first (`ofa import --num-classes/--in-channels` or a recipe's init.supernet)"
                )
        self.model = supernet.extract(arch).to(self.device).train()
        self.teacher = frozen_teacher(supernet).to(self.device) if recipe.distill.teacher == "supernet" else None
        d = recipe.data
        self.train_loader = make_loader(self.data.train, d.batch_size, shuffle=True, seed=recipe.seed, drop_last=True)
        self.val_loader = make_loader(self.data.val, d.eval_batch_size, shuffle=False, seed=0)
        self.steps_per_epoch = len(self.train_loader)
        if self.steps_per_epoch == 0:
            raise OFAError(
                f"{recipe.source}: data.batch_size {d.batch_size} is larger than the "
                f"{len(self.data.train)} training images"
            )
        ref = recipe.optimizer.lr_reference_batch
        self.lr_scale = d.batch_size / ref if ref else 1.0
        self.optimizer = build_optimizer(self.model, recipe.optimizer, recipe.lr * self.lr_scale)
        self.meta = {
            **self.data.meta(),
            "data": recipe.data.to_dict(),
            "recipe": recipe.to_dict(),
            "supernet_sha256": supernet.meta.get("supernet_sha256"),
            "finetuned": True,
        }
        self.epoch = self.step = self.global_step = self.metrics_lines = 0
        self.epoch_loss, self.last_lr = 0.0, 0.0

    def run(self, resume: bool) -> FinetuneResult:
        state = self.store.load_latest() if resume else None
        if resume:
            self.store.remove_partial_writes()
        if state is not None:
            self._load(state)
        self._truncate_metrics()
        write_yaml(self.out / "recipe.yaml", self.recipe.to_dict())
        val = math.nan
        for epoch in range(self.epoch, self.recipe.epochs):
            self._train_epoch(epoch)
            val = evaluate(self.model, self.val_loader, self.arch.resolution, self.device)["top1"]
            self._write_metrics(
                {
                    "kind": "epoch",
                    "epoch": epoch + 1,
                    "step": self.global_step,
                    "lr": self.last_lr,
                    "loss": self.epoch_loss / self.steps_per_epoch,
                    "val_top1": val,
                }
            )
            tqdm.write(
                f"finetune epoch {epoch + 1}/{self.recipe.epochs}: loss "
                f"{self.epoch_loss / self.steps_per_epoch:.4f}, val top-1 {val:.2f}%"
            )
            self.epoch, self.step, self.epoch_loss = epoch + 1, 0, 0.0
            self._save()
        return self._finish(val)

    def _train_epoch(self, epoch: int) -> None:
        set_loader_epoch(self.train_loader, epoch, start_batch=self.step)
        every = self.recipe.checkpoint.every_steps
        with tqdm(
            total=self.steps_per_epoch,
            initial=self.step,
            desc=f"finetune {epoch + 1}/{self.recipe.epochs}",
            unit="step",
            leave=False,
            disable=None,
        ) as bar:
            for x, y in self.train_loader:
                self.epoch_loss += self._train_step(epoch, x, y)
                self.step += 1
                self.global_step += 1
                bar.update()
                if every and self.global_step % every == 0 and self.step < self.steps_per_epoch:
                    self._save()

    def _train_step(self, epoch: int, x: torch.Tensor, y: torch.Tensor) -> float:
        r = self.recipe
        torch.manual_seed(step_seed(r.seed, 0, epoch, self.step, 0))  # dropout
        self.last_lr = lr_at(
            epoch * self.steps_per_epoch + self.step,
            self.steps_per_epoch,
            r.phase,
            ScheduleConfig(lr_schedule=r.lr_schedule, min_lr=r.min_lr),
            self.lr_scale,
        )
        set_lr(self.optimizer, self.last_lr)
        x, y = resize(x.to(self.device), self.arch.resolution), y.to(self.device)
        logits = self.model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=r.optimizer.label_smoothing)
        if self.teacher is not None and r.distill.ratio > 0:
            with torch.no_grad():
                soft = self.teacher(x)
            loss = loss + r.distill.ratio * soft_cross_entropy(logits, soft, r.distill.temperature)
        if not math.isfinite(float(loss)):
            raise OFAError(f"loss became {float(loss)} in epoch {epoch + 1}, step {self.step + 1}: stopped; lower lr")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if r.optimizer.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), r.optimizer.grad_clip)
        self.optimizer.step()
        return float(loss)

    # ------------------------------------------------------------------ files
    def _save(self) -> None:
        self.store.save(
            {
                "kind": "finetune",
                "space": self.space.to_dict(),
                "arch": self.arch.to_dict(),
                "meta": self.meta,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "phase": 0,
                "epoch": self.epoch,
                "step": self.step,
                "global_step": self.global_step,
                "epoch_loss": self.epoch_loss,
                "last_lr": self.last_lr,
                "metrics_lines": self.metrics_lines,
            }
        )

    def _load(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "finetune" or state.get("arch") != self.arch.to_dict():
            raise OFAError(
                f"{self.store.folder}: its checkpoints are not of a fine-tuning run of this arch; "
                "resume with the --arch the run started with, or choose another --out"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.step, self.global_step = int(state["epoch"]), int(state["step"]), int(state["global_step"])
        self.epoch_loss, self.last_lr = float(state["epoch_loss"]), float(state["last_lr"])
        self.metrics_lines = int(state["metrics_lines"])

    def _truncate_metrics(self) -> None:
        """Drop lines written after the checkpoint resumed from (none when starting afresh)."""
        path = self.out / "metrics.jsonl"
        kept = path.read_text().splitlines(keepends=True)[: self.metrics_lines] if path.is_file() else []
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(kept))

    def _write_metrics(self, row: dict[str, Any]) -> None:
        with (self.out / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        self.metrics_lines += 1

    def _finish(self, val: float) -> FinetuneResult:
        test_loader = make_loader(self.data.test, self.recipe.data.eval_batch_size, shuffle=False, seed=0)
        start = time.perf_counter()
        test = evaluate(self.model, test_loader, self.arch.resolution, self.device)["top1"]
        self._write_metrics(
            {
                "kind": "test",
                "step": self.global_step,
                "test_top1": test,
                "val_top1": val,
                "seconds": time.perf_counter() - start,
            }
        )
        self.model.eval().cpu()
        path = save_subnet(
            self.model,
            self.space,
            self.arch,
            self.out / "subnet.pt",
            meta={**self.meta, "test_top1": test, "val_top1": val},
        )
        tqdm.write(f"test top-1 {test:.2f}% ({self.arch.short()}); subnet: {path}")
        return FinetuneResult(path, self.arch, val, test, self.recipe.epochs)
