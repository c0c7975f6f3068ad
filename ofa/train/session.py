"""One training session: what every training loop sets up alike, so that each loop keeps only what differs.

Modelled on torchtune's recipes: `TrainingSession` sets up, in order, the data bundle
(``_setup_data``), the loaders that shard and resume it (``_setup_loaders``), the learning-rate
scale for the global batch (``_setup_lr``), and the run's records (``_setup_records``:
``metrics.jsonl`` with its tracker -- TensorBoard, W&B, MLflow -- and the checkpoint store). A
loop then builds its model, takes its optimizer from `new_optimizer`, and trains each epoch with
`run_epoch` and its own step function.

The session also holds the resume position (phase, epoch, step, the current epoch's loss, the
run's clock and the torch RNG): every checkpoint is a loop's own state plus `position_state`, and
`opened` continues from the newest one. Loops using it: progressive shrinking (`ofa.train.loop`),
fine-tuning one subnet (`ofa.train.finetune`) and the benchmark's from-scratch twin
(``bench/ps_vs_scratch.py``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from tqdm import tqdm

from ofa.data.config import DataConfig
from ofa.data.datasets import DataBundle, build_data
from ofa.data.loaders import LoaderOptions, make_loader, set_loader_epoch
from ofa.families.family import Space
from ofa.train.bn import CalibrationBatches
from ofa.train.checkpoint import CheckpointStore
from ofa.train.distributed import DistEnv
from ofa.train.optim import build_optimizer, lr_at, set_lr
from ofa.train.recipe import CheckpointConfig, OptimizerConfig, PhaseConfig, ScheduleConfig
from ofa.utils.errors import OFAError
from ofa.utils.io import write_yaml
from ofa.utils.tracking import LoggingConfig, Tracker, open_tracker

StepFn = Callable[[int, torch.Tensor, torch.Tensor], float]  # (step in the epoch, images, labels) -> loss


class TrainingRecipe(Protocol):
    """The sections a session reads from a recipe (`Recipe`, `FinetuneRecipe`)."""

    data: DataConfig
    optimizer: OptimizerConfig
    checkpoint: CheckpointConfig
    logging: LoggingConfig
    seed: int
    source: str

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class SessionConfig:
    """What a session is set up from: the recipe sections every training loop shares."""

    data: DataConfig
    optimizer: OptimizerConfig
    seed: int
    source: str = "recipe"
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    recipe: Mapping[str, Any] = field(default_factory=dict)  # the resolved recipe: recipe.yaml, meta, tracker

    @classmethod
    def of(cls, recipe: TrainingRecipe) -> SessionConfig:
        r = recipe
        return cls(r.data, r.optimizer, r.seed, r.source, r.checkpoint, r.logging, r.to_dict())


@dataclass
class Position:
    """Where a run is: the next step to run, what the current epoch has accumulated, the run's seconds."""

    phase: int = 0
    epoch: int = 0
    step: int = 0
    global_step: int = 0
    epoch_loss: float = 0.0
    epoch_steps: int = 0
    epoch_seconds: float = 0.0
    epoch_cpu: float = 0.0  # the epoch's CPU seconds (`bench.ps_cost` compares schedules' steps by them)
    elapsed: float = 0.0
    elapsed_cpu: float = 0.0  # this process's CPU seconds: a cost that other load on the machine does not inflate

    @property
    def mean_loss(self) -> float:
        return self.epoch_loss / max(1, self.epoch_steps)


class MetricsLog:
    """``metrics.jsonl``: one JSON object per line, appended by rank 0; truncated on resume."""

    def __init__(self, path: Path | None, enabled: bool) -> None:
        self.path, self.enabled = path, enabled
        self.count = 0
        self.tracker = Tracker()  # the same rows, as TensorBoard / W&B / MLflow figures

    def truncate(self, lines: int) -> None:
        if self.enabled:
            kept = self.path.read_text().splitlines(keepends=True)[:lines] if self.path.is_file() else []
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("".join(kept))
            self.count = len(kept)
        else:
            self.count = lines

    def write(self, row: dict[str, Any]) -> None:
        self.count += 1
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            self.tracker.row(row)


def apply_gradients(loss: torch.Tensor, model: nn.Module, optimizer: torch.optim.Optimizer, clip: float | None) -> None:
    """One plain optimizer step on ``loss`` (one model, no loss scaling), the gradient norm clipped to ``clip``."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()


class TrainingSession:
    """Data, loaders, learning-rate scale, records and resume position of one training run.

    Without a run folder (``out`` None) nothing is written: no metrics, no checkpoints. ``data``
    is a bundle already built from ``cfg.data`` (built here when None).
    """

    def __init__(
        self, cfg: SessionConfig, env: DistEnv, out: Path | None = None, data: DataBundle | None = None
    ) -> None:
        self.cfg, self.env, self.device, self.out = cfg, env, env.device, out
        self.pos, self.last_lr = Position(), 0.0
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        self._setup_data(data)
        self._setup_loaders()
        self._setup_lr()
        self._setup_records()

    # ------------------------------------------------------------------ set-up
    def _setup_data(self, data: DataBundle | None) -> None:
        d = self.cfg.data
        self.data = data if data is not None else build_data(d)
        # What every saved model records of its training: the recipe, the data and its normalization.
        self.meta = {"recipe": dict(self.cfg.recipe), "data": d.to_dict(), **self.data.meta()}

    def _setup_loaders(self) -> None:
        d, env, seed = self.cfg.data, self.env, self.cfg.seed
        shard = LoaderOptions(
            rank=env.rank, world_size=env.world_size, num_workers=d.num_workers, pin_memory=self.device.type == "cuda"
        )
        # Calibration always uses the augmentation of epoch 0, so its workers (and evaluation's) can persist.
        kept = dataclasses.replace(shard, persistent_workers=True)
        self.train_loader = make_loader(
            self.data.train, d.batch_size, shuffle=True, seed=seed, drop_last=True, options=shard
        )
        calib = make_loader(self.data.calib, d.batch_size, shuffle=True, seed=seed + 1, options=kept)
        self.calib_loader = CalibrationBatches(calib)  # the same images wherever training is
        self.val_loader = make_loader(self.data.val, d.eval_batch_size, shuffle=False, seed=0, options=kept)
        self.test_loader = make_loader(self.data.test, d.eval_batch_size, shuffle=False, seed=0, options=kept)
        self.steps_per_epoch = len(self.train_loader)
        self.global_batch = d.batch_size * env.world_size
        if self.steps_per_epoch == 0:
            raise OFAError(
                f"{self.cfg.source}: data.batch_size: a global batch of {self.global_batch} is larger than "
                f"the {len(self.data.train)} training images"
            )

    def _setup_lr(self) -> None:
        ref = self.cfg.optimizer.lr_reference_batch
        self.lr_scale = self.global_batch / ref if ref else 1.0

    def _setup_records(self) -> None:
        out = self.out
        self.store = CheckpointStore(out / "checkpoints", self.cfg.checkpoint.keep) if out is not None else None
        self.metrics = MetricsLog(out / "metrics.jsonl" if out is not None else None, out is not None and self.is_main)

    @property
    def is_main(self) -> bool:
        return self.env.is_main

    def require_fit(self, space: Space, problem: str) -> None:
        """Raise `OFAError` with ``problem`` (formatted with source, key, have, want and data) where
        ``space``'s classes or input channels are not those of the data."""
        for key, want in (("num_classes", self.data.num_classes), ("in_channels", self.data.in_channels)):
            have = getattr(space, key)
            if have != want:
                d = self.cfg.data.name
                raise OFAError(problem.format(source=self.cfg.source, key=key, have=have, want=want, data=d))

    def new_optimizer(self, model: nn.Module, lr: float) -> torch.optim.Optimizer:
        """The recipe's optimizer; ``lr`` is for the reference batch and is scaled to the global one."""
        return build_optimizer(model, self.cfg.optimizer, lr * self.lr_scale)

    # ------------------------------------------------------------------ training
    def schedule_lr(
        self, optimizer: torch.optim.Optimizer, phase: PhaseConfig, schedule: ScheduleConfig, epoch: int, step: int
    ) -> float:
        """Set (and return) the learning rate of step ``step`` of epoch ``epoch`` of ``phase``."""
        n = self.steps_per_epoch
        self.last_lr = lr_at(epoch * n + step, n, phase, schedule, self.lr_scale)
        set_lr(optimizer, self.last_lr)
        return self.last_lr

    def run_epoch(self, epoch_index: int, desc: str, step: StepFn, save: Callable[[], None] | None = None) -> None:
        """The rest of one epoch (from the position's step): ``step`` trains each batch and returns its
        loss; ``save`` checkpoints every ``checkpoint.every_steps`` steps inside the epoch.
        ``epoch_index`` selects the batch order and augmentation."""
        pos, n = self.pos, self.steps_per_epoch
        set_loader_epoch(self.train_loader, epoch_index, start_batch=pos.step)
        every = self.cfg.checkpoint.every_steps if save is not None else 0
        with tqdm(
            total=n,
            initial=pos.step,
            desc=desc,
            unit="step",
            leave=False,
            disable=None if self.is_main else True,
            dynamic_ncols=True,
        ) as bar:
            for x, y in self.train_loader:
                loss = step(pos.step, x, y)
                pos.step, pos.global_step = pos.step + 1, pos.global_step + 1
                pos.epoch_loss, pos.epoch_steps = pos.epoch_loss + loss, pos.epoch_steps + 1
                bar.update()
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{self.last_lr:.3g}")
                self.metrics.tracker.scalars({"train/step_loss": loss, "train/step_lr": self.last_lr}, pos.global_step)
                if every and pos.global_step % every == 0 and pos.step < n:
                    save()

    def next_epoch(self, phase_done: bool = False) -> None:
        """Move the position to the start of the next epoch (of the next phase when ``phase_done``)."""
        p = self.pos
        p.phase, p.epoch = (p.phase + 1, 0) if phase_done else (p.phase, p.epoch + 1)
        p.step, p.epoch_loss, p.epoch_steps, p.epoch_seconds, p.epoch_cpu = 0, 0.0, 0, 0.0, 0.0

    def epoch_figures(self) -> dict[str, float]:
        """Step, mean loss, last learning rate, seconds and throughput of the epoch so far."""
        p = self.pos
        return {
            "step": p.global_step,
            "loss": p.mean_loss,
            "lr": self.last_lr,
            "seconds": p.epoch_seconds,
            "cpu_s": p.epoch_cpu,
            "images_per_s": p.epoch_steps * self.global_batch / max(p.epoch_seconds, 1e-9),
        }

    def tick(self) -> None:
        """Add the wall and CPU seconds since the last tick to the run's (and the epoch's) clock."""
        wall, cpu = time.perf_counter(), time.process_time()
        self.pos.elapsed += wall - self._wall
        self.pos.epoch_seconds += wall - self._wall
        self.pos.elapsed_cpu += cpu - self._cpu
        self.pos.epoch_cpu += cpu - self._cpu
        self._wall, self._cpu = wall, cpu

    # ------------------------------------------------------------------ records and resume
    @contextmanager
    def opened(self, resume: bool, load: Callable[[dict[str, Any]], None]) -> Iterator[None]:
        """For the ``with`` block: the newest checkpoint handed to ``load`` (with ``resume``; a fresh
        start without one), ``metrics.jsonl`` cut back to that checkpoint, ``recipe.yaml`` and the tracker."""
        state = self._latest() if resume else None
        if state is not None:
            load(state)
        self.metrics.truncate(self.metrics.count)  # 0 on a fresh start
        # The recipe the run started with; a resumed run's checkpoints hold the one it continued with.
        recipe_file = self.out / "recipe.yaml"
        if self.is_main and (state is None or not recipe_file.is_file()):
            write_yaml(recipe_file, dict(self.cfg.recipe))
        if self.is_main:
            self.metrics.tracker = open_tracker(
                self.cfg.logging, self.out, self.cfg.recipe, self.pos.global_step, self.log
            )
        try:
            yield
        finally:
            self.metrics.tracker.close()

    def _latest(self) -> dict[str, Any] | None:
        if self.is_main:
            self.store.remove_partial_writes()
        state = self.store.load_latest()
        self.log(
            f"resuming from {self.store.paths()[-1]}"
            if state
            else f"no checkpoint in {self.store.folder}: starting from scratch"
        )
        return state

    def position_state(self) -> dict[str, Any]:
        """What a checkpoint holds besides the loop's own state."""
        p = self.pos
        return {
            "phase": p.phase,
            "epoch": p.epoch,
            "step": p.step,
            "global_step": p.global_step,
            "epoch_stats": {
                "loss": p.epoch_loss,
                "steps": p.epoch_steps,
                "seconds": p.epoch_seconds,
                "cpu_s": p.epoch_cpu,
            },
            "scheduler": {"lr": self.last_lr, "phase_step": p.epoch * self.steps_per_epoch + p.step},
            "rng": {"torch": torch.get_rng_state()},
            "metrics_lines": self.metrics.count,
            "elapsed": p.elapsed,
            "elapsed_cpu": p.elapsed_cpu,
            "world_size": self.env.world_size,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue at checkpoint ``state``'s position. Call it last: it sets the torch RNG."""
        stats = state["epoch_stats"]
        self.pos = Position(
            phase=int(state["phase"]),
            epoch=int(state["epoch"]),
            step=int(state["step"]),
            global_step=int(state["global_step"]),
            epoch_loss=stats["loss"],
            epoch_steps=int(stats["steps"]),
            epoch_seconds=stats["seconds"],
            epoch_cpu=stats.get("cpu_s", 0.0),  # absent from checkpoints older than the epoch's CPU clock
            elapsed=state["elapsed"],
            elapsed_cpu=state.get("elapsed_cpu", 0.0),  # absent from checkpoints older than the CPU clock
        )
        self.last_lr = state["scheduler"]["lr"]
        self.metrics.count = int(state["metrics_lines"])
        torch.set_rng_state(state["rng"]["torch"])

    def save(self, state: Mapping[str, Any]) -> None:
        """Checkpoint the loop's ``state`` with the position (rank 0 writes it)."""
        self.tick()
        if self.store is not None and self.is_main:
            self.store.save({**state, **self.position_state()})

    def last_good(self) -> str:
        paths = self.store.paths() if self.store is not None else []
        return f"last good checkpoint: {paths[-1] if paths else 'none yet'}"

    def log(self, message: str) -> None:
        if self.is_main:
            tqdm.write(message)
