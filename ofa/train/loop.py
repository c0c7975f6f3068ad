"""The progressive-shrinking training loop.

Phases run in order; each restricts which subnets are sampled. A step samples the phase's
subnets (seeded by seed/phase/epoch/step), runs each on every micro-batch of the batch at one
resolution, accumulates their gradients (plus distillation from a teacher), averages them over
ranks and takes one optimizer step. The position (phase, epoch, step) plus the weights,
optimizer and teacher are all the state there is, so a checkpoint resumes bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ofa.data.datasets import build_data
from ofa.data.loaders import LoaderOptions, make_loader, set_loader_epoch
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.families.mbv3.transfer import adapt_supernet
from ofa.train.bn import recalibrate_bn, resize
from ofa.train.checkpoint import CheckpointStore
from ofa.train.distill import frozen_teacher, soft_cross_entropy
from ofa.train.distributed import DistEnv, all_reduce_sum, average_gradients, broadcast_state, process_group
from ofa.train.evaluate import evaluate_arch
from ofa.train.noise_scale import MicroBatchGradNorms, NoiseScaleEstimator, batch_advice
from ofa.train.optim import build_optimizer, lr_at, set_lr
from ofa.train.plots import plot_training_curves
from ofa.train.recipe import PhaseConfig, Recipe, load_recipe
from ofa.train.resume import check_resume, check_same_space, prepare_run_folder
from ofa.train.sampling import eval_subnets, step_seed, step_subnets
from ofa.utils.errors import OFAError
from ofa.utils.io import write_yaml
from ofa.utils.tracking import Tracker, open_tracker


def train(recipe: Recipe, out_dir: str | Path, resume: bool = False) -> Path:
    """Run every phase of ``recipe`` into ``out_dir``; returns ``out_dir/supernet.pt``.

    Under ``torchrun`` this process is one data-parallel rank. ``resume`` continues from the
    newest checkpoint in ``out_dir/checkpoints`` (starting afresh if there is none), provided
    the recipe and world size are those it was trained with (see `ofa.train.resume`). Raises
    `OFAError` for a run folder that holds a run (without ``resume``) or cannot be created,
    a recipe whose data do not fit its space, a refused resume, and a diverging loss.
    """
    out = Path(out_dir)
    prepare_run_folder(out, resume)
    with process_group(recipe.device) as env:
        return Trainer(recipe, out, env).run(resume)


def train_file(
    recipe_path: str | Path, out_dir: str | Path | None = None, *, resume: bool = False, overrides: Sequence[str] = ()
) -> Path:
    """`train` from a recipe file with ``--set`` overrides; the run folder defaults to ``runs/RECIPE_NAME``."""
    recipe = load_recipe(recipe_path, overrides)
    return train(recipe, Path(out_dir) if out_dir else Path("runs") / Path(recipe_path).stem, resume=resume)


class MetricsLog:
    """``metrics.jsonl``: one JSON object per line, appended by rank 0; truncated on resume."""

    def __init__(self, path: Path, enabled: bool) -> None:
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


class Trainer:
    """State and steps of one training run.

    Without a run folder (``out_dir`` None) it is the training state that
    `ofa.train.noise_measure` measures a phase with.
    """

    def __init__(self, recipe: Recipe, out_dir: str | Path | None, env: DistEnv) -> None:
        self.recipe, self.env, self.device = recipe, env, env.device
        self.out = Path(out_dir) if out_dir is not None else None
        cuda = self.device.type == "cuda"
        self.amp = recipe.amp and cuda
        self.amp_dtype = torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float16
        self.channels_last = recipe.channels_last and cuda
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp and self.amp_dtype == torch.float16)

        self.data = build_data(recipe.data)
        space = recipe.space
        for key, have, want in (
            ("num_classes", space.num_classes, self.data.num_classes),
            ("in_channels", space.in_channels, self.data.in_channels),
        ):
            if have != want:
                raise OFAError(f"{recipe.source}: space.{key}: {have}, but the {recipe.data.name} data has {want}")
        self.net = self._initial_net().to(self.device)
        if self.channels_last:
            self.net.to(memory_format=torch.channels_last)
        broadcast_state(self.net, env)
        self.params = list(self.net.parameters())

        self._make_loaders()
        self.steps_per_epoch = len(self.train_loader)
        self.global_batch = recipe.data.batch_size * env.world_size
        if self.steps_per_epoch == 0:
            raise OFAError(
                f"{recipe.source}: data.batch_size: a global batch of {self.global_batch} is larger than "
                f"the {len(self.data.train)} training images"
            )
        ref = recipe.optimizer.lr_reference_batch
        self.lr_scale = self.global_batch / ref if ref else 1.0
        self.micro_batches = recipe.schedule.micro_batches
        self.measure_noise = recipe.noise_scale.enabled and self.micro_batches * env.world_size >= 2
        self.inplace = recipe.distill.teacher == "inplace"

        self.meta = {
            "recipe": recipe.to_dict(),
            "data": recipe.data.to_dict(),
            **self.data.meta(),
            "seed": recipe.seed,
            "space_fingerprint": space.fingerprint(),
            "recipe_source": recipe.source,
        }
        self.teacher: OFAMobileNetV3 | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.noise = NoiseScaleEstimator(recipe.noise_scale.ema)
        # Position of the next step to run, and what the current epoch has accumulated so far.
        self.phase = self.epoch = self.step = self.global_step = 0
        self.epoch_loss, self.epoch_steps, self.epoch_seconds, self.elapsed = 0.0, 0, 0.0, 0.0
        self.elapsed_cpu = 0.0  # this process's CPU seconds: a cost that other load on the machine does not inflate
        self.last_lr = 0.0
        self._clock, self._cpu_clock = time.perf_counter(), time.process_time()
        if self.out is not None:
            self.store = CheckpointStore(self.out / "checkpoints", recipe.checkpoint.keep)
            self.metrics = MetricsLog(self.out / "metrics.jsonl", env.is_main)

    def _initial_net(self) -> OFAMobileNetV3:
        """Seeded random weights, or those of ``init.supernet`` fitted to the space (classes, channels)."""
        recipe = self.recipe
        torch.manual_seed(recipe.seed)
        net = OFAMobileNetV3(recipe.space)
        if recipe.init.supernet:
            start = adapt_supernet(OFAMobileNetV3.load(recipe.init.supernet), recipe.space, recipe.seed)
            net.load_state_dict(start.state_dict())
        return net

    def _make_loaders(self) -> None:
        d, env, seed = self.recipe.data, self.env, self.recipe.seed
        shard = LoaderOptions(
            rank=env.rank, world_size=env.world_size, num_workers=d.num_workers, pin_memory=self.device.type == "cuda"
        )
        # Calibration always uses the augmentation of epoch 0, so its workers (and evaluation's) can persist.
        kept = dataclasses.replace(shard, persistent_workers=True)
        self.train_loader = make_loader(
            self.data.train, d.batch_size, shuffle=True, seed=seed, drop_last=True, options=shard
        )
        self.calib_loader = make_loader(self.data.train, d.batch_size, shuffle=True, seed=seed + 1, options=kept)
        self.val_loader = make_loader(self.data.val, d.eval_batch_size, shuffle=False, seed=0, options=kept)
        self.test_loader = make_loader(self.data.test, d.eval_batch_size, shuffle=False, seed=0, options=kept)

    # ------------------------------------------------------------------ run
    def run(self, resume: bool) -> Path:
        self._open_run_dir(resume)
        if self.env.is_main:
            self.metrics.tracker = open_tracker(
                self.recipe.logging, self.out, self.recipe.to_dict(), self.global_step, self.log
            )
        try:
            phases = self.recipe.phases
            for p in range(self.phase, len(phases)):
                if self.epoch == 0 and self.step == 0:
                    self.begin_phase(p)
                for epoch in range(self.epoch, phases[p].total_epochs):
                    self._train_epoch(p, epoch)
                    self._end_epoch(p, epoch)
            return self._finish()
        finally:
            self.metrics.tracker.close()

    def _open_run_dir(self, resume: bool) -> None:
        state = None
        if resume:
            if self.env.is_main:
                self.store.remove_partial_writes()
            state = self.store.load_latest()
            self.log(
                f"resuming from {self.store.paths()[-1]}"
                if state
                else f"no checkpoint in {self.store.folder}: starting from scratch"
            )
        if state is not None:
            for line in check_resume(state, self.recipe, self.env.world_size, self.store.paths()[-1]):
                self.log(line)
            self.load_state(state)
        else:
            self.metrics.truncate(0)
        # The recipe the run started with; a resumed run's checkpoints hold the one it continued with.
        recipe_file = self.out / "recipe.yaml"
        if self.env.is_main and (state is None or not recipe_file.is_file()):
            write_yaml(recipe_file, self.recipe.to_dict())

    def begin_phase(self, p: int) -> None:
        """Once per phase: take the teacher, reorganize channels, start a fresh optimizer."""
        phase = self.recipe.phases[p]
        tp = self.recipe.teacher_phase_index
        if tp is not None and p > tp and self.teacher is None:
            self.teacher = frozen_teacher(self.net)
        if phase.reorganize_channels:
            trained = sorted({e for q in self.recipe.phases[:p] for e in q.expands})
            self.net.reorganize_channels(frozen_expands=trained)
        self.optimizer = build_optimizer(self.net, self.recipe.optimizer, phase.lr * self.lr_scale)
        self.noise.reset()
        self.log(
            f"phase {p + 1}/{len(self.recipe.phases)} {phase.name!r}: kernels {list(phase.kernels)}, "
            f"expands {list(phase.expands)}, depths {list(phase.depths)}, resolutions "
            f"{list(phase.resolutions)}, {phase.subnets_per_step} subnet(s)/step, {phase.total_epochs} epochs, "
            f"lr {phase.lr * self.lr_scale:g}"
            + (f", teacher: {'init supernet' if tp == -1 else 'full network'}" if self.teacher else "")
        )

    # ------------------------------------------------------------------ training
    def _train_epoch(self, p: int, epoch: int) -> None:
        phase = self.recipe.phases[p]
        self.net.train()
        set_loader_epoch(self.train_loader, self.global_epoch(p, epoch), start_batch=self.step)
        every = self.recipe.checkpoint.every_steps
        with tqdm(
            total=self.steps_per_epoch,
            initial=self.step,
            desc=f"{phase.name} {epoch + 1}/{phase.total_epochs}",
            unit="step",
            leave=False,
            disable=None if self.env.is_main else True,
            dynamic_ncols=True,
        ) as bar:
            for x, y in self.train_loader:
                loss = self.train_step(p, epoch, self.step, x, y)
                self.step += 1
                self.global_step += 1
                self.epoch_loss += loss
                self.epoch_steps += 1
                bar.update()
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{self.last_lr:.3g}")
                self.metrics.tracker.scalars({"train/step_loss": loss, "train/step_lr": self.last_lr}, self.global_step)
                if every and self.global_step % every == 0 and self.step < self.steps_per_epoch:
                    self.save_checkpoint()

    def train_step(self, p: int, epoch: int, step: int, x: torch.Tensor, y: torch.Tensor) -> float:
        """One optimizer step over the step's subnets; returns the mean loss over subnets and ranks."""
        r, phase = self.recipe, self.recipe.phases[p]
        archs = step_subnets(r.space, phase, self.inplace, r.seed, p, epoch, step)
        torch.manual_seed(step_seed(r.seed, p, epoch, step, self.env.rank))
        self.last_lr = lr_at(
            epoch * self.steps_per_epoch + step, self.steps_per_epoch, phase, r.schedule, self.lr_scale
        )
        set_lr(self.optimizer, self.last_lr)
        self.optimizer.zero_grad(set_to_none=True)
        loss, norms = self.accumulate_gradients(archs, x, y, self.micro_batches, self.measure_noise)
        stats = (
            all_reduce_sum(
                torch.tensor([loss, norms.mean_sq if norms else 0.0], dtype=torch.float64, device=self.device), self.env
            )
            / self.env.world_size
        )
        loss = float(stats[0])
        if not math.isfinite(loss):
            raise OFAError(
                f"loss became {loss} in phase {phase.name!r}, epoch {epoch + 1}, step {step + 1}: stopped; "
                f"{self._last_good()}. Lower phases[{p}].lr or set optimizer.grad_clip"
            )
        average_gradients(self.params, self.env)
        self.scaler.unscale_(self.optimizer)  # no-op unless fp16 loss scaling is on
        # The norm before clipping (nothing is clipped without optimizer.grad_clip).
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, r.optimizer.grad_clip or math.inf))
        if not math.isfinite(grad_norm) and not self.scaler.is_enabled():  # fp16 overflow: the scaler skips it
            raise OFAError(
                f"gradients became {grad_norm} in phase {phase.name!r}, epoch {epoch + 1}, step {step + 1}:"
                f" stopped before applying them; {self._last_good()}. Lower phases[{p}].lr or set "
                "optimizer.grad_clip"
            )
        if norms is not None and math.isfinite(grad_norm) and math.isfinite(float(stats[1])):
            b_small = x.shape[0] // self.micro_batches
            self.noise.update(
                float(stats[1]), grad_norm**2, b_small, b_small * self.micro_batches * self.env.world_size
            )
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss

    def _last_good(self) -> str:
        paths = self.store.paths() if self.out is not None else []
        return f"last good checkpoint: {paths[-1] if paths else 'none yet'}"

    def accumulate_gradients(
        self, archs: list[Arch], x: torch.Tensor, y: torch.Tensor, micro_batches: int, measure_noise: bool
    ) -> tuple[float, MicroBatchGradNorms | None]:
        """Backward of every subnet on every micro-batch (micro-batches outermost, so each one's
        gradient can be read off for the noise scale). Returns the mean loss and those norms."""
        distill = self.recipe.distill
        x = resize(x.to(self.device, non_blocking=True), archs[0].resolution)
        y = y.to(self.device, non_blocking=True)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        norms = MicroBatchGradNorms(self.params) if measure_noise else None
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
        total = torch.zeros((), device=self.device)
        for xm, ym in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
            if norms is not None:
                norms.begin()
            soft = None
            if self.teacher is not None and distill.ratio > 0:
                with torch.no_grad(), self._autocast():
                    soft = self.teacher(xm).float()
            for i, arch in enumerate(archs):
                self.net.set_active(arch)
                with self._autocast():
                    logits = self.net(xm)
                loss = F.cross_entropy(logits.float(), ym, label_smoothing=self.recipe.optimizer.label_smoothing)
                if soft is not None and distill.ratio > 0:
                    loss = loss + distill.ratio * soft_cross_entropy(logits, soft, distill.temperature)
                if self.inplace and i == 0:
                    soft = logits.detach().float()
                self.scaler.scale(loss / micro_batches).backward()
                total += loss.detach()
            if norms is not None:
                norms.end(micro_batches / scale)
        return float(total) / (micro_batches * len(archs)), norms

    def _autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp)

    def _end_epoch(self, p: int, epoch: int) -> None:
        phase = self.recipe.phases[p]
        self._tick()
        last = epoch + 1 == phase.total_epochs
        noise = self.noise.summary()
        row = {
            "kind": "epoch",
            "phase": phase.name,
            "phase_index": p,
            "epoch": epoch + 1,
            "epochs": phase.total_epochs,
            "global_epoch": self.global_epoch(p, epoch) + 1,
            "step": self.global_step,
            "loss": self.epoch_loss / max(1, self.epoch_steps),
            "lr": self.last_lr,
            "seconds": self.epoch_seconds,
            "images_per_s": self.epoch_steps * self.global_batch / max(self.epoch_seconds, 1e-9),
            "noise_scale": noise,
        }
        self.metrics.write(row)
        noise_text = f", B_simple {noise['b_simple']:.0f}" if noise and noise["b_simple"] else ""
        self.log(
            f"{phase.name} epoch {epoch + 1}/{phase.total_epochs}: loss {row['loss']:.4f}, lr {self.last_lr:.3g}"
            f"{noise_text}, {self.epoch_seconds:.1f} s"
        )
        every = self.recipe.eval.every
        if last or (every and (epoch + 1) % every == 0):
            results = self.evaluate(eval_subnets(self.recipe.space, phase, self.recipe.eval.subnets), self.val_loader)
            self.metrics.write(
                {
                    "kind": "eval",
                    "split": "val",
                    "phase": phase.name,
                    "phase_index": p,
                    "epoch": epoch + 1,
                    "global_epoch": row["global_epoch"],
                    "step": self.global_step,
                    "subnets": results,
                }
            )
            self.log(f"{phase.name} val top-1: " + ", ".join(f"{n} {v['top1']:.1f}" for n, v in results.items()))
        if last:
            self.metrics.write(
                {
                    "kind": "phase",
                    "phase": phase.name,
                    "phase_index": p,
                    "step": self.global_step,
                    "elapsed_s": self.elapsed,
                    "noise_scale": noise,
                }
            )
            if noise:  # what the phase's noise scale says about the global batch (issue 17)
                self.log(f"{phase.name}: {batch_advice(self.global_batch, noise['b_simple'], len(self.data.train))}")
            self.plot()
        self._tick()  # evaluation time counts in the run's elapsed time, not in the next epoch's
        self.phase, self.epoch, self.step = (p + 1, 0, 0) if last else (p, epoch + 1, 0)
        self.epoch_loss, self.epoch_steps, self.epoch_seconds = 0.0, 0, 0.0
        self.save_checkpoint()

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, archs: dict[str, Arch], loader: torch.utils.data.DataLoader) -> dict[str, dict[str, Any]]:
        """Top-1/loss of each subnet after BN recalibration, leaving the network exactly as it was."""
        saved = {k: v.clone() for k, v in self.net.named_buffers()}
        active = self.net.active_arch
        set_loader_epoch(self.calib_loader, 0)  # calibration images do not depend on where training is
        results = {}
        try:
            for name, arch in archs.items():
                res = evaluate_arch(
                    self.net,
                    arch,
                    self.calib_loader,
                    loader,
                    self.recipe.eval.calib_batches,
                    self.device,
                    sync=self.env.distributed,
                )
                results[name] = {"top1": res["top1"], "loss": res["loss"], "arch": arch.to_dict()}
        finally:
            for k, v in self.net.named_buffers():
                v.copy_(saved[k])
            self.net.set_active(active)
        return results

    def _finish(self) -> Path:
        space = self.recipe.space
        every_choice = PhaseConfig(
            name="final",
            epochs=1,
            lr=1.0,
            kernels=space.kernels,
            expands=space.expands,
            depths=space.depths,
            resolutions=space.resolutions,
        )
        results = self.evaluate(eval_subnets(space, every_choice, self.recipe.eval.subnets), self.test_loader)
        largest, smallest = space.max_arch(), space.min_arch()
        summary = {
            key: {"name": name, "top1": v["top1"]}
            for name, v in results.items()
            for key, arch in (("largest", largest), ("smallest", smallest))
            if Arch.from_dict(v["arch"]) == arch
        }
        # Leave the full network's BN statistics calibrated in the saved supernet.
        self.net.set_active(largest)
        set_loader_epoch(self.calib_loader, 0)
        recalibrate_bn(
            self.net,
            self.calib_loader,
            self.recipe.eval.calib_batches,
            self.device,
            largest.resolution,
            sync=self.env.distributed,
        )
        self._tick()
        path = self.out / "supernet.pt"
        if self.env.is_main:
            self.metrics.write(
                {
                    "kind": "test",
                    "split": "test",
                    "step": self.global_step,
                    "subnets": results,
                    **summary,
                    "elapsed_s": self.elapsed,
                    "cpu_s": self.elapsed_cpu,
                }
            )
            meta = {**self.meta, "test": {n: v["top1"] for n, v in results.items()}}
            self.net.save(path, meta=meta)
            if self.recipe.checkpoint.safetensors:
                self.net.save(path.with_suffix(".safetensors"), meta=meta)
            self.plot()
        self.log(
            "test top-1: "
            + ", ".join(f"{k} ({v['name']}) {v['top1']:.2f}%" for k, v in summary.items())
            + f"; supernet: {path}"
        )
        return path

    # ------------------------------------------------------------------ state
    def global_epoch(self, p: int, epoch: int) -> int:
        return sum(q.total_epochs for q in self.recipe.phases[:p]) + epoch

    def save_checkpoint(self) -> None:
        self._tick()
        at_phase_start = self.epoch == 0 and self.step == 0
        state = {
            "space": self.recipe.space.to_dict(),
            "model": self.net.state_dict(),
            "meta": self.meta,
            "teacher": self.teacher.state_dict() if self.teacher is not None else None,
            "optimizer": None if at_phase_start or self.optimizer is None else self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "scheduler": {"lr": self.last_lr, "phase_step": self.epoch * self.steps_per_epoch + self.step},
            "phase": self.phase,
            "epoch": self.epoch,
            "step": self.step,
            "global_step": self.global_step,
            "rng": {"torch": torch.get_rng_state()},
            "epoch_stats": {"loss": self.epoch_loss, "steps": self.epoch_steps, "seconds": self.epoch_seconds},
            "noise_scale": self.noise.state_dict(),
            "metrics_lines": self.metrics.count,
            "elapsed": self.elapsed,
            "world_size": self.env.world_size,
            "elapsed_cpu": self.elapsed_cpu,
        }
        if self.env.is_main:
            self.store.save(state)

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint (weights, teacher, optimizer, position, statistics)."""
        check_same_space(state, self.recipe)
        self.net.load_state_dict(state["model"])
        self.phase, self.epoch, self.step = int(state["phase"]), int(state["epoch"]), int(state["step"])
        self.global_step = int(state["global_step"])
        if state.get("teacher") is not None:
            self.teacher = frozen_teacher(self.net)
            self.teacher.load_state_dict(state["teacher"])
        if state.get("optimizer") is not None and self.phase < len(self.recipe.phases):
            phase = self.recipe.phases[self.phase]
            self.optimizer = build_optimizer(self.net, self.recipe.optimizer, phase.lr * self.lr_scale)
            self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.noise.load_state_dict(state["noise_scale"])
        stats = state["epoch_stats"]
        self.epoch_loss, self.epoch_steps, self.epoch_seconds = stats["loss"], int(stats["steps"]), stats["seconds"]
        self.elapsed, self.last_lr = state["elapsed"], state["scheduler"]["lr"]
        self.elapsed_cpu = state.get("elapsed_cpu", 0.0)
        torch.set_rng_state(state["rng"]["torch"])
        if self.out is not None:
            self.metrics.truncate(int(state["metrics_lines"]))

    def _tick(self) -> None:
        now = time.perf_counter()
        self.elapsed += now - self._clock
        cpu = time.process_time()
        self.elapsed_cpu += cpu - self._cpu_clock
        self._cpu_clock = cpu
        self.epoch_seconds += now - self._clock
        self._clock = now

    def log(self, message: str) -> None:
        if self.env.is_main:
            tqdm.write(message)

    def plot(self) -> None:
        if self.env.is_main:
            plot_training_curves(self.out / "metrics.jsonl", self.out / "training_curves.png")
