"""The progressive-shrinking training loop.

Phases run in order; each restricts which subnets are sampled. A phase starts by taking the
teacher, reorganizing channels and starting a fresh optimizer; each of its steps is one
`ProgressiveStep` (the step's subnets on every micro-batch, gradients averaged over ranks). The
set-up every training loop shares (data, loaders, learning-rate scale, metrics and tracker,
checkpoints, the resume position) is the `TrainingSession`; evaluation and the rows it writes are
`ofa.train.ps_report`. The position (phase, epoch, step) plus the weights, optimizer and teacher
are all the state there is, so a checkpoint resumes bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from ofa.families.family import Arch, Supernet
from ofa.families.registry import family_of, load_supernet
from ofa.train.distill import frozen_teacher
from ofa.train.distributed import DistEnv, broadcast_state, process_group
from ofa.train.plots import plot_training_curves
from ofa.train.ps_report import PSReport, Results, corners, evaluate_subnets, every_choice
from ofa.train.ps_step import ProgressiveStep
from ofa.train.recipe import Recipe, load_recipe
from ofa.train.resume import check_resume, check_same_space, prepare_run_folder
from ofa.train.sampling import eval_subnets
from ofa.train.session import SessionConfig, TrainingSession

# While training, the curves' PNG is redrawn at a phase's end at most this often (a draw is ~0.5 s, more than
# a small run's phase); the finished run always draws it.
PLOT_EVERY_S = 60.0


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


class Trainer:
    """One progressive-shrinking run: its session, supernet, step and report.

    Without a run folder (``out_dir`` None) it is the training state that
    `ofa.train.noise_measure` measures a phase with.
    """

    def __init__(self, recipe: Recipe, out_dir: str | Path | None, env: DistEnv) -> None:
        self.recipe, self.env, self.device = recipe, env, env.device
        out = Path(out_dir) if out_dir is not None else None
        self.session = TrainingSession(SessionConfig.of(recipe), env, out)
        self.session.require_fit(recipe.space, "{source}: space.{key}: {have}, but the {data} data has {want}")
        self.net = self._initial_net().to(self.device)
        self.ps = ProgressiveStep(recipe, self.net, self.session)
        broadcast_state(self.net, env)
        self.report = PSReport(recipe, self.session)
        self.plotted_at = time.monotonic()
        self.meta = {
            **self.session.meta,
            "seed": recipe.seed,
            "space_fingerprint": recipe.space.fingerprint(),
            "recipe_source": recipe.source,
        }

    def _initial_net(self) -> Supernet:
        """Seeded random weights, or those of ``init.supernet`` fitted to the space (classes, channels)."""
        recipe = self.recipe
        torch.manual_seed(recipe.seed)
        family = family_of(recipe.space)
        net = family.supernet_type(recipe.space)
        if recipe.init.supernet:
            start = family.adapt_supernet(load_supernet(recipe.init.supernet), recipe.space, recipe.seed)
            net.load_state_dict(start.state_dict())
        return net

    # ------------------------------------------------------------------ run
    def run(self, resume: bool) -> Path:
        s, phases = self.session, self.recipe.phases
        with s.opened(resume, self._resume_from):
            for p in range(s.pos.phase, len(phases)):
                if s.pos.epoch == 0 and s.pos.step == 0:
                    self.begin_phase(p)
                for epoch in range(s.pos.epoch, phases[p].total_epochs):
                    self.net.train()
                    desc = f"{phases[p].name} {epoch + 1}/{phases[p].total_epochs}"
                    step = partial(self.train_step, p, epoch)
                    s.run_epoch(self.global_epoch(p, epoch), desc, step, self.save_checkpoint)
                    self._end_epoch(p, epoch)
            return self._finish()

    def _resume_from(self, state: dict[str, Any]) -> None:
        for line in check_resume(state, self.recipe, self.env.world_size, self.session.store.paths()[-1]):
            self.session.log(line)
        self.load_state(state)

    def begin_phase(self, p: int) -> None:
        """Once per phase: take the teacher, reorganize channels, start a fresh optimizer."""
        phase, ps = self.recipe.phases[p], self.ps
        tp = self.recipe.teacher_phase_index
        if tp is not None and p > tp and ps.teacher is None:
            ps.teacher = frozen_teacher(self.net)
        if phase.reorganize_channels:
            done = self.recipe.phases[:p]
            self.net.reorganize_for({dim: sorted({v for q in done for v in q.choices[dim]}) for dim in phase.choices})
        ps.optimizer = self.session.new_optimizer(self.net, phase.lr)
        ps.noise.reset()
        self.session.log(
            f"phase {p + 1}/{len(self.recipe.phases)} {phase.name!r}: "
            + "".join(f"{dim} {list(c)}, " for dim, c in phase.choices.items())
            + f"{phase.subnets_per_step} subnet(s)/step, {phase.total_epochs} epochs, "
            f"lr {phase.lr * self.session.lr_scale:g}"
            + (f", teacher: {'init supernet' if tp == -1 else 'full network'}" if ps.teacher else "")
        )

    def train_step(self, p: int, epoch: int, step: int, x: torch.Tensor, y: torch.Tensor) -> float:
        """One optimizer step over the step's subnets; returns the mean loss over subnets and ranks."""
        self.session.schedule_lr(self.ps.optimizer, self.recipe.phases[p], self.recipe.schedule, epoch, step)
        return self.ps(p, epoch, step, x, y)

    def _end_epoch(self, p: int, epoch: int) -> None:
        phase, s = self.recipe.phases[p], self.session
        s.tick()
        last = epoch + 1 == phase.total_epochs
        noise, global_epoch = self.ps.noise.summary(), self.global_epoch(p, epoch) + 1
        self.report.epoch(p, epoch, global_epoch, noise)
        every = self.recipe.eval.every
        if last or (every and (epoch + 1) % every == 0):
            results = self.evaluate(eval_subnets(self.recipe.space, phase, self.recipe.eval.subnets), s.val_loader)
            self.report.evaluation(p, epoch, global_epoch, results)
        if last:
            self.report.phase_end(p, noise)
            if time.monotonic() - self.plotted_at >= PLOT_EVERY_S:
                self.plot()
        s.tick()  # evaluation time counts in the run's elapsed time, not in the next epoch's
        s.next_epoch(phase_done=last)
        self.save_checkpoint()

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, archs: dict[str, Arch], loader: DataLoader, keep: Arch | None = None) -> Results:
        """Top-1/loss of each subnet after BN recalibration, leaving the network exactly as it was (but for
        ``keep``'s recalibrated statistics)."""
        return evaluate_subnets(self.net, archs, loader, self.session, self.recipe.eval.calib_batches, keep)

    def _finish(self) -> Path:
        s, space = self.session, self.recipe.space
        # The full network's BN statistics stay calibrated in the saved supernet (the largest is always tested).
        largest = space.max_arch()
        tested = eval_subnets(space, every_choice(space), self.recipe.eval.subnets)
        results = self.evaluate(tested, s.test_loader, keep=largest)
        self.net.set_active(largest)
        summary = corners(space, results)
        s.tick()
        path = self.session.out / "supernet.pt"
        if self.env.is_main:
            self.report.test(results, summary)
            meta = {**self.meta, "test": {n: v["top1"] for n, v in results.items()}}
            self.net.save(path, meta=meta)
            if self.recipe.checkpoint.safetensors:
                self.net.save(path.with_suffix(".safetensors"), meta=meta)
            self.plot()
        s.log(
            "test top-1: "
            + ", ".join(f"{k} ({v['name']}) {v['top1']:.2f}%" for k, v in summary.items())
            + f"; supernet: {path}"
        )
        return path

    # ------------------------------------------------------------------ state
    def global_epoch(self, p: int, epoch: int) -> int:
        return sum(q.total_epochs for q in self.recipe.phases[:p]) + epoch

    def save_checkpoint(self) -> None:
        pos = self.session.pos
        at_phase_start = pos.epoch == 0 and pos.step == 0
        state = {
            "space": self.recipe.space.to_dict(),
            "model": self.net.state_dict(),
            "meta": self.meta,
            **self.ps.state_dict(at_phase_start),
        }
        self.session.save(state)

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint (weights, teacher, optimizer, position, statistics)."""
        check_same_space(state, self.recipe)
        self.net.load_state_dict(state["model"])
        phase = int(state["phase"])
        lr = self.recipe.phases[phase].lr if phase < len(self.recipe.phases) else None
        self.ps.load_state_dict(state, lr)
        self.session.restore(state)  # last: it sets the RNG, which building the teacher draws from

    def plot(self) -> None:
        if self.env.is_main:
            out = self.session.out
            plot_training_curves(out / "metrics.jsonl", out / "training_curves.png")
        self.plotted_at = time.monotonic()
