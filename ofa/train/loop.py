"""The progressive-shrinking training loop.

Phases run in order; each restricts which subnets are sampled. A step samples the phase's
subnets (seeded by seed/phase/epoch/step), runs each on every micro-batch of the batch at one
resolution, accumulates their gradients (plus distillation from a teacher), averages them over
ranks and takes one optimizer step. The position (phase, epoch, step) plus the weights,
optimizer and teacher are all the state there is, so a checkpoint resumes bit for bit.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ofa.bn import recalibrate_bn
from ofa.data import build_data, make_loader, set_loader_epoch
from ofa.errors import OFAError
from ofa.evaluate import evaluate_arch, resize
from ofa.io import write_yaml
from ofa.space import Arch
from ofa.supernet import OFAMobileNetV3
from ofa.train.checkpoint import CheckpointStore
from ofa.train.distill import frozen_teacher, soft_cross_entropy
from ofa.train.distributed import (
    DistEnv,
    all_reduce_sum,
    average_gradients,
    broadcast_state,
    init_distributed,
    shutdown,
)
from ofa.train.noise_scale import MicroBatchGradNorms, NoiseScaleEstimator, grad_sq_norm, suggest_batch_size
from ofa.train.optim import build_optimizer, lr_at, set_lr
from ofa.train.plots import plot_training_curves
from ofa.train.recipe import PhaseConfig, Recipe
from ofa.train.sampling import eval_subnets, step_seed, step_subnets


def train(recipe: Recipe, out_dir: str | Path, resume: bool = False) -> Path:
    """Run every phase of ``recipe`` into ``out_dir``; returns ``out_dir/supernet.pt``.

    Under ``torchrun`` this process is one data-parallel rank. ``resume`` continues from the
    newest checkpoint in ``out_dir/checkpoints`` (starting afresh if there is none).
    """
    out = Path(out_dir)
    if not resume and (CheckpointStore(out / "checkpoints").paths() or (out / "supernet.pt").exists()):
        raise OFAError(f"{out}: already holds a training run; pass --resume to continue it or choose another --out")
    env = init_distributed(recipe.device)
    try:
        return Trainer(recipe, out, env).run(resume)
    finally:
        shutdown(env)


class MetricsLog:
    """``metrics.jsonl``: one JSON object per line, appended by rank 0; truncated on resume."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path, self.enabled = path, enabled
        self.count = 0

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


class Trainer:
    """State and steps of one training run (also used by ``ofa noise-scale`` to measure a phase)."""

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
        for key, have, want in (("num_classes", space.num_classes, self.data.num_classes),
                                ("in_channels", space.in_channels, self.data.in_channels)):
            if have != want:
                raise OFAError(f"{recipe.source}: space.{key}: {have}, but the {recipe.data.name} data has {want}")
        torch.manual_seed(recipe.seed)
        self.net = OFAMobileNetV3(space).to(self.device)
        if self.channels_last:
            self.net.to(memory_format=torch.channels_last)
        broadcast_state(self.net, env)
        self.params = list(self.net.parameters())

        d = recipe.data
        shard = {"num_workers": d.num_workers, "rank": env.rank, "world_size": env.world_size, "pin_memory": cuda}
        self.train_loader = make_loader(self.data.train, d.batch_size, shuffle=True, seed=recipe.seed,
                                        drop_last=True, **shard)
        # Calibration always uses the augmentation of epoch 0, so its workers can persist.
        self.calib_loader = make_loader(self.data.train, d.batch_size, shuffle=True, seed=recipe.seed + 1,
                                        persistent_workers=True, **shard)
        self.val_loader = make_loader(self.data.val, d.eval_batch_size, shuffle=False, seed=0,
                                      persistent_workers=True, **shard)
        self.test_loader = make_loader(self.data.test, d.eval_batch_size, shuffle=False, seed=0,
                                       persistent_workers=True, **shard)
        self.steps_per_epoch = len(self.train_loader)
        self.global_batch = d.batch_size * env.world_size
        if self.steps_per_epoch == 0:
            raise OFAError(f"{recipe.source}: data.batch_size: a global batch of {self.global_batch} is larger than "
                           f"the {len(self.data.train)} training images")
        ref = recipe.optimizer.lr_reference_batch
        self.lr_scale = self.global_batch / ref if ref else 1.0
        self.micro_batches = recipe.schedule.micro_batches
        self.measure_noise = recipe.noise_scale.enabled and self.micro_batches * env.world_size >= 2
        self.inplace = recipe.distill.teacher == "inplace"

        self.meta = {
            "recipe": recipe.to_dict(), "data": recipe.data.to_dict(), **self.data.meta(), "seed": recipe.seed,
            "space_fingerprint": space.fingerprint(), "recipe_source": recipe.source,
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

    # ------------------------------------------------------------------ run
    def run(self, resume: bool) -> Path:
        self._open_run_dir(resume)
        phases = self.recipe.phases
        for p in range(self.phase, len(phases)):
            if self.epoch == 0 and self.step == 0:
                self.begin_phase(p)
            for epoch in range(self.epoch, phases[p].total_epochs):
                self._train_epoch(p, epoch)
                self._end_epoch(p, epoch)
        return self._finish()

    def _open_run_dir(self, resume: bool) -> None:
        state = None
        if resume:
            if self.env.is_main:
                self.store.remove_partial_writes()
            state = self.store.load_latest()
            self.log(f"resuming from {self.store.paths()[-1]}" if state
                     else f"no checkpoint in {self.store.folder}: starting from scratch")
        if state is not None:
            self.load_state(state)
        else:
            self.metrics.truncate(0)
        if self.env.is_main:
            write_yaml(self.out / "recipe.yaml", self.recipe.to_dict())

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
        self.log(f"phase {p + 1}/{len(self.recipe.phases)} {phase.name!r}: kernels {list(phase.kernels)}, "
                 f"expands {list(phase.expands)}, depths {list(phase.depths)}, resolutions "
                 f"{list(phase.resolutions)}, {phase.subnets_per_step} subnet(s)/step, {phase.total_epochs} epochs, "
                 f"lr {phase.lr * self.lr_scale:g}" + (", teacher: full network" if self.teacher else ""))

    # ------------------------------------------------------------------ training
    def _train_epoch(self, p: int, epoch: int) -> None:
        phase = self.recipe.phases[p]
        self.net.train()
        set_loader_epoch(self.train_loader, self.global_epoch(p, epoch), start_batch=self.step)
        every = self.recipe.checkpoint.every_steps
        with tqdm(total=self.steps_per_epoch, initial=self.step, desc=f"{phase.name} {epoch + 1}/{phase.total_epochs}",
                  unit="step", leave=False, disable=None if self.env.is_main else True, dynamic_ncols=True) as bar:
            for x, y in self.train_loader:
                loss = self.train_step(p, epoch, self.step, x, y)
                self.step += 1
                self.global_step += 1
                self.epoch_loss += loss
                self.epoch_steps += 1
                bar.update()
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{self.last_lr:.3g}")
                if every and self.global_step % every == 0 and self.step < self.steps_per_epoch:
                    self.save_checkpoint()

    def train_step(self, p: int, epoch: int, step: int, x: torch.Tensor, y: torch.Tensor) -> float:
        """One optimizer step over the step's subnets; returns the mean loss over subnets and ranks."""
        r, phase = self.recipe, self.recipe.phases[p]
        archs = step_subnets(r.space, phase, self.inplace, r.seed, p, epoch, step)
        torch.manual_seed(step_seed(r.seed, p, epoch, step, self.env.rank))
        self.last_lr = lr_at(epoch * self.steps_per_epoch + step, self.steps_per_epoch, phase, r.schedule,
                             self.lr_scale)
        set_lr(self.optimizer, self.last_lr)
        self.optimizer.zero_grad(set_to_none=True)
        loss, norms = self.accumulate_gradients(archs, x, y, self.micro_batches, self.measure_noise)
        stats = all_reduce_sum(torch.tensor([loss, norms.mean_sq if norms else 0.0], dtype=torch.float64,
                                            device=self.device), self.env) / self.env.world_size
        loss = float(stats[0])
        if not math.isfinite(loss):
            raise OFAError(f"loss became {loss} in phase {phase.name!r}, epoch {epoch + 1}, step {step + 1}: stopped; "
                           f"{self._last_good()}. Lower phases[{p}].lr or set optimizer.grad_clip")
        average_gradients(self.params, self.env)
        self.scaler.unscale_(self.optimizer)  # no-op unless fp16 loss scaling is on
        # The norm before clipping (nothing is clipped without optimizer.grad_clip).
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, r.optimizer.grad_clip or math.inf))
        if not math.isfinite(grad_norm) and not self.scaler.is_enabled():  # fp16 overflow: the scaler skips it
            raise OFAError(f"gradients became {grad_norm} in phase {phase.name!r}, epoch {epoch + 1}, step {step + 1}:"
                           f" stopped before applying them; {self._last_good()}. Lower phases[{p}].lr or set "
                           "optimizer.grad_clip")
        if norms is not None and math.isfinite(grad_norm) and math.isfinite(float(stats[1])):
            b_small = x.shape[0] // self.micro_batches
            self.noise.update(float(stats[1]), grad_norm**2, b_small,
                              b_small * self.micro_batches * self.env.world_size)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss

    def _last_good(self) -> str:
        paths = self.store.paths() if self.out is not None else []
        return f"last good checkpoint: {paths[-1] if paths else 'none yet'}"

    def accumulate_gradients(self, archs: list[Arch], x: torch.Tensor, y: torch.Tensor, micro_batches: int,
                             measure_noise: bool) -> tuple[float, MicroBatchGradNorms | None]:
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
        row = {"kind": "epoch", "phase": phase.name, "phase_index": p, "epoch": epoch + 1,
               "epochs": phase.total_epochs, "global_epoch": self.global_epoch(p, epoch) + 1,
               "step": self.global_step, "loss": self.epoch_loss / max(1, self.epoch_steps), "lr": self.last_lr,
               "seconds": self.epoch_seconds,
               "images_per_s": self.epoch_steps * self.global_batch / max(self.epoch_seconds, 1e-9),
               "noise_scale": noise}
        self.metrics.write(row)
        noise_text = f", B_simple {noise['b_simple']:.0f}" if noise and noise["b_simple"] else ""
        self.log(f"{phase.name} epoch {epoch + 1}/{phase.total_epochs}: loss {row['loss']:.4f}, lr {self.last_lr:.3g}"
                 f"{noise_text}, {self.epoch_seconds:.1f} s")
        every = self.recipe.eval.every
        if last or (every and (epoch + 1) % every == 0):
            results = self.evaluate(eval_subnets(self.recipe.space, phase, self.recipe.eval.subnets), self.val_loader)
            self.metrics.write({"kind": "eval", "split": "val", "phase": phase.name, "phase_index": p,
                                "epoch": epoch + 1, "global_epoch": row["global_epoch"], "step": self.global_step,
                                "subnets": results})
            self.log(f"{phase.name} val top-1: " + ", ".join(f"{n} {v['top1']:.1f}" for n, v in results.items()))
        if last:
            self.metrics.write({"kind": "phase", "phase": phase.name, "phase_index": p, "step": self.global_step,
                                "elapsed_s": self.elapsed, "noise_scale": noise})
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
                res = evaluate_arch(self.net, arch, self.calib_loader, loader, self.recipe.eval.calib_batches,
                                    self.device, sync=self.env.distributed)
                results[name] = {"top1": res["top1"], "loss": res["loss"], "arch": arch.to_dict()}
        finally:
            for k, v in self.net.named_buffers():
                v.copy_(saved[k])
            self.net.set_active(active)
        return results

    def _finish(self) -> Path:
        space = self.recipe.space
        every_choice = PhaseConfig(name="final", epochs=1, lr=1.0, kernels=space.kernels, expands=space.expands,
                                   depths=space.depths, resolutions=space.resolutions)
        results = self.evaluate(eval_subnets(space, every_choice, self.recipe.eval.subnets), self.test_loader)
        largest, smallest = space.max_arch(), space.min_arch()
        summary = {key: {"name": name, "top1": v["top1"]} for name, v in results.items()
                   for key, arch in (("largest", largest), ("smallest", smallest)) if Arch.from_dict(v["arch"]) == arch}
        # Leave the full network's BN statistics calibrated in the saved supernet.
        self.net.set_active(largest)
        set_loader_epoch(self.calib_loader, 0)
        recalibrate_bn(self.net, self.calib_loader, self.recipe.eval.calib_batches, self.device, largest.resolution,
                       sync=self.env.distributed)
        self._tick()
        path = self.out / "supernet.pt"
        if self.env.is_main:
            self.metrics.write({"kind": "test", "split": "test", "step": self.global_step, "subnets": results,
                                **summary, "elapsed_s": self.elapsed, "cpu_s": self.elapsed_cpu})
            self.net.save(path, meta={**self.meta, "test": {n: v["top1"] for n, v in results.items()}})
            self.plot()
        self.log("test top-1: " + ", ".join(f"{k} ({v['name']}) {v['top1']:.2f}%" for k, v in summary.items())
                 + f"; supernet: {path}")
        return path

    # ------------------------------------------------------------------ noise scale
    def measure(self, p: int, steps: int, accumulate: int) -> dict[str, Any]:
        """Gradient noise scale of phase ``p`` at the current weights, without changing them.

        Each step draws the phase's subnets and ``accumulate`` micro-batches of the training
        micro-batch size (per process); the small batch is one micro-batch, the big one all of
        them over all processes. Estimates are averaged over the steps.
        """
        if steps < 1 or accumulate < 2:
            raise OFAError(f"noise scale: need steps >= 1 and accumulate >= 2, got {steps} and {accumulate}")
        r, phase = self.recipe, self.recipe.phases[p]
        if self.phase != p or (self.epoch == 0 and self.step == 0):
            self.begin_phase(p)  # the teacher and channel order the phase would train with
        b = r.data.batch_size // self.micro_batches
        loader = make_loader(self.data.train, b * accumulate, shuffle=True, seed=r.seed, drop_last=True,
                             rank=self.env.rank, world_size=self.env.world_size)
        if len(loader) == 0:
            raise OFAError(f"noise scale: {accumulate} micro-batches of {b} images x {self.env.world_size} process(es) "
                           f"exceed the {len(self.data.train)} training images; lower --accumulate")
        estimator = NoiseScaleEstimator(ema=1.0)
        b_big = b * accumulate * self.env.world_size
        batches = _cycle(loader)
        self.net.train()
        for i in tqdm(range(steps), desc=f"noise scale {phase.name}", disable=None if self.env.is_main else True,
                      leave=False):
            x, y = next(batches)
            # An epoch index past the phase's end: a subnet stream training never draws.
            archs = step_subnets(r.space, phase, self.inplace, r.seed, p, phase.total_epochs, i)
            torch.manual_seed(step_seed(r.seed, p, phase.total_epochs, i, self.env.rank))
            self.net.zero_grad(set_to_none=True)
            _, norms = self.accumulate_gradients(archs, x, y, accumulate, True)
            small = all_reduce_sum(torch.tensor(norms.mean_sq, dtype=torch.float64, device=self.device), self.env)
            average_gradients(self.params, self.env)
            scale = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
            estimator.update(float(small) / self.env.world_size, grad_sq_norm(self.params, 1.0 / scale), b, b_big)
        self.net.zero_grad(set_to_none=True)
        summary = estimator.summary()
        return {"phase": phase.name, "phase_index": p, "steps": steps, "b_small": b, "b_big": b_big, **summary,
                "current_global_batch": self.global_batch, "lr": phase.lr * self.lr_scale,
                "train_images": len(self.data.train),
                "suggested_batch": suggest_batch_size(summary["b_simple"], len(self.data.train))}

    # ------------------------------------------------------------------ state
    def global_epoch(self, p: int, epoch: int) -> int:
        return sum(q.total_epochs for q in self.recipe.phases[:p]) + epoch

    def save_checkpoint(self) -> None:
        self._tick()
        at_phase_start = self.epoch == 0 and self.step == 0
        state = {
            "space": self.recipe.space.to_dict(), "model": self.net.state_dict(), "meta": self.meta,
            "teacher": self.teacher.state_dict() if self.teacher is not None else None,
            "optimizer": None if at_phase_start or self.optimizer is None else self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "scheduler": {"lr": self.last_lr, "phase_step": self.epoch * self.steps_per_epoch + self.step},
            "phase": self.phase, "epoch": self.epoch, "step": self.step, "global_step": self.global_step,
            "rng": {"torch": torch.get_rng_state()},
            "epoch_stats": {"loss": self.epoch_loss, "steps": self.epoch_steps, "seconds": self.epoch_seconds},
            "noise_scale": self.noise.state_dict(), "metrics_lines": self.metrics.count, "elapsed": self.elapsed,
            "elapsed_cpu": self.elapsed_cpu,
        }
        if self.env.is_main:
            self.store.save(state)

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint (weights, teacher, optimizer, position, statistics)."""
        if state["space"] != self.recipe.space.to_dict():
            raise OFAError(f"the checkpoint's search space differs from that of {self.recipe.source}; "
                           "use the recipe the run started with")
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


def measure_noise_scale(recipe: Recipe, steps: int, phase: str | None = None, run_dir: str | Path | None = None,
                        accumulate: int = 8) -> dict[str, Any]:
    """B_simple of one phase at given weights: a run's newest checkpoint, or a freshly initialised network.

    The phase defaults to the run's current one (the first without a run). See `Trainer.measure`.
    """
    env = init_distributed(recipe.device)
    try:
        trainer = Trainer(recipe, None, env)
        if run_dir is not None:
            state = CheckpointStore(Path(run_dir) / "checkpoints").load_latest()
            if state is None:
                raise OFAError(f"{run_dir}: no checkpoint to measure (checkpoints/ is empty or missing)")
            trainer.load_state(state)
        p = recipe.phase_index(phase) if phase is not None else min(trainer.phase, len(recipe.phases) - 1)
        return trainer.measure(p, steps, accumulate)
    finally:
        shutdown(env)


def _cycle(loader: torch.utils.data.DataLoader):
    epoch = 0
    while True:
        set_loader_epoch(loader, epoch)
        yield from loader
        epoch += 1
