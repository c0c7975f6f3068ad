"""One progressive-shrinking optimizer step, and the state that changes the weights.

A step samples the phase's subnets (seeded by seed/phase/epoch/step), runs each on every
micro-batch of the batch at its resolution (mixed precision on CUDA, plus distillation from the
teacher), averages the gradients over ranks, feeds the gradient noise-scale estimate and takes one
optimizer step. The teacher, optimizer, loss scaler and noise estimate live here, beside the step.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ofa.families.corner_grad import writes_keeping_zeros
from ofa.families.family import Arch, Supernet
from ofa.train.bn import resize
from ofa.train.distill import frozen_teacher, soft_cross_entropy
from ofa.train.distributed import all_reduce_sum, average_gradients
from ofa.train.noise_scale import MicroBatchGradNorms, NoiseScaleEstimator
from ofa.train.recipe import Recipe
from ofa.train.sampling import micro_batch_seeds, step_subnets
from ofa.train.session import TrainingSession
from ofa.utils.errors import OFAError


def gradient_norm(params: list[torch.Tensor], clip: float | None) -> float:
    """The gradients' total 2-norm before clipping; clipped to ``clip`` where one is set (a scaling, which keeps
    corner gradients tracked: `ofa.families.corner_grad`). Without one nothing writes into them."""
    grads = [p.grad for p in params if p.grad is not None]
    if clip is not None:
        with writes_keeping_zeros(grads):
            return float(torch.nn.utils.clip_grad_norm_(params, clip))
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) if grads else 0.0


class ProgressiveStep:
    """The weights-changing half of a progressive-shrinking run: its step and that step's state.

    ``teacher`` (a frozen copy, or None) and ``optimizer`` (one per phase) are set by the trainer.
    """

    def __init__(self, recipe: Recipe, net: Supernet, session: TrainingSession) -> None:
        self.recipe, self.net, self.session = recipe, net, session
        self.env, self.device = session.env, session.device
        cuda = self.device.type == "cuda"
        self.amp = recipe.amp and cuda
        self.amp_dtype = torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float16
        # CPU stays NCHW: there oneDNN's channels-last convolution backward (torch 2.14.1, an AVX2 CPU) returned
        # wrong gradients for some batches of the digits supernet, though NHWC trains it faster.
        self.channels_last = recipe.channels_last and cuda
        if self.channels_last:
            net.to(memory_format=torch.channels_last)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp and self.amp_dtype == torch.float16)
        self.params = list(net.parameters())
        self.micro_batches = recipe.schedule.micro_batches
        self.measure_noise = recipe.noise_scale.enabled and self.micro_batches * self.env.world_size >= 2
        self.inplace = recipe.distill.teacher == "inplace"
        self.noise = NoiseScaleEstimator(recipe.noise_scale.ema)
        self.teacher: Supernet | None = None
        self.optimizer: torch.optim.Optimizer | None = None

    def __call__(self, p: int, epoch: int, step: int, x: torch.Tensor, y: torch.Tensor) -> float:
        """One optimizer step over the step's subnets (at the learning rate already set); returns the
        mean loss over subnets and ranks."""
        r, phase, env = self.recipe, self.recipe.phases[p], self.env
        archs = step_subnets(r.space, phase, self.inplace, r.seed, p, epoch, step)
        seeds = micro_batch_seeds(r.seed, p, epoch, step, env.rank, self.micro_batches)
        self.optimizer.zero_grad(set_to_none=True)
        loss, norms = self.accumulate_gradients(archs, x, y, seeds, self.measure_noise)
        both = torch.tensor([loss, norms.mean_sq if norms else 0.0], dtype=torch.float64, device=self.device)
        stats = all_reduce_sum(both, env) / env.world_size
        loss = float(stats[0])
        where = f"in phase {phase.name!r}, epoch {epoch + 1}, step {step + 1}"
        hint = f"Lower phases[{p}].lr or set optimizer.grad_clip"
        if not math.isfinite(loss):
            raise OFAError(f"loss became {loss} {where}: stopped; {self.session.last_good()}. {hint}")
        average_gradients(self.params, env)
        self.scaler.unscale_(self.optimizer)  # no-op unless fp16 loss scaling is on
        grad_norm = gradient_norm(self.params, r.optimizer.grad_clip)
        if not math.isfinite(grad_norm) and not self.scaler.is_enabled():  # fp16 overflow: the scaler skips it
            raise OFAError(
                f"gradients became {grad_norm} {where}: stopped before applying them; "
                f"{self.session.last_good()}. {hint}"
            )
        if norms is not None and math.isfinite(grad_norm) and math.isfinite(float(stats[1])):
            b_small = x.shape[0] // self.micro_batches
            self.noise.update(float(stats[1]), grad_norm**2, b_small, b_small * self.micro_batches * env.world_size)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss

    def accumulate_gradients(
        self, archs: list[Arch], x: torch.Tensor, y: torch.Tensor, dropout_seeds: list[int], measure_noise: bool
    ) -> tuple[float, MicroBatchGradNorms | None]:
        """Backward of every subnet on every micro-batch, one per dropout seed (micro-batches outermost, so each
        one's gradient can be read off for the noise scale). Returns the mean loss and those norms."""
        distill = self.recipe.distill
        micro_batches = len(dropout_seeds)
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        # The batch at each resolution of the step (one, unless the sandwich's corners have their own), cut into
        # micro-batches: inputs[resolution][m].
        inputs = {}
        for res in dict.fromkeys(a.resolution for a in archs):
            xr = resize(x, res)
            if self.channels_last:
                xr = xr.contiguous(memory_format=torch.channels_last)
            inputs[res] = xr.chunk(micro_batches)
        norms = MicroBatchGradNorms(self.params) if measure_noise else None
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
        total = torch.zeros((), device=self.device)
        for m, (seed, ym) in enumerate(zip(dropout_seeds, y.chunk(micro_batches))):
            torch.manual_seed(seed)
            if norms is not None:
                norms.begin()
            soft = None
            if self.teacher is not None and distill.ratio > 0:
                with torch.no_grad(), self._autocast():  # the teacher sees the first subnet's resolution
                    soft = self.teacher(inputs[archs[0].resolution][m]).float()
            for i, arch in enumerate(archs):
                self.net.set_active(arch)
                with self._autocast():
                    logits = self.net(inputs[arch.resolution][m])
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

    # ------------------------------------------------------------------ state
    def state_dict(self, at_phase_start: bool) -> dict[str, Any]:
        """Teacher, optimizer (none at a phase start: each phase starts a fresh one), scaler, noise estimate."""
        return {
            "teacher": self.teacher.state_dict() if self.teacher is not None else None,
            "optimizer": None if at_phase_start or self.optimizer is None else self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "noise_scale": self.noise.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], lr: float | None) -> None:
        """The state of `state_dict`; the optimizer (for the phase's learning rate ``lr``; None: the
        run is past its last phase) only where the checkpoint holds one."""
        if state.get("teacher") is not None:
            self.teacher = frozen_teacher(self.net)
            self.teacher.load_state_dict(state["teacher"])
        if state.get("optimizer") is not None and lr is not None:
            self.optimizer = self.session.new_optimizer(self.net, lr)
            self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.noise.load_state_dict(state["noise_scale"])
