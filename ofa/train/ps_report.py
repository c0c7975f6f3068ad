"""Evaluation and reporting of a progressive-shrinking run: subnets' accuracy, and the rows and lines it writes.

Rows go to ``metrics.jsonl`` and the tracker (through the session's metrics log), lines to the
console of rank 0: one per epoch, per evaluation, per phase end and for the final test.
"""

from __future__ import annotations

from typing import Any

import torch

from ofa.families.family import Arch, Space, Supernet
from ofa.families.registry import arch_from_dict
from ofa.train.evaluate import evaluate_arch
from ofa.train.noise_scale import batch_advice
from ofa.train.recipe import PhaseConfig, Recipe
from ofa.train.session import TrainingSession

Results = dict[str, dict[str, Any]]  # subnet name -> top1, loss, arch


@torch.no_grad()
def evaluate_subnets(
    net: Supernet,
    archs: dict[str, Arch],
    loader: torch.utils.data.DataLoader,
    session: TrainingSession,
    calib: int,
    keep: Arch | None = None,
) -> Results:
    """Top-1/loss of each subnet after BN recalibration on ``calib`` batches, leaving the network exactly as it was
    but for ``keep`` (one of ``archs``), whose recalibrated statistics stay: evaluated first, its recalibration
    is what recalibrating it afterwards would give (train-mode BN normalizes by the batch, whatever it held)."""
    if keep is not None and keep not in archs.values():
        raise ValueError(f"keep: {keep.to_dict()} is not among the evaluated subnets")
    saved = {k: v.clone() for k, v in net.named_buffers()}
    active = net.active_arch
    results = {}
    try:
        for name, arch in sorted(archs.items(), key=lambda item: item[1] != keep):
            sync = session.env.distributed
            res = evaluate_arch(net, arch, session.calib_loader, loader, calib, session.device, sync=sync)
            results[name] = {"top1": res["top1"], "loss": res["loss"], "arch": arch.to_dict()}
            if arch == keep:
                saved = {k: v.clone() for k, v in net.named_buffers()}
    finally:
        for k, v in net.named_buffers():
            v.copy_(saved[k])
        net.set_active(active)
    return {name: results[name] for name in archs}


def every_choice(space: Space) -> PhaseConfig:
    """The whole space as a phase: what the final test draws its subnets from."""
    return PhaseConfig(name="final", epochs=1, lr=1.0, choices=space.elastic_dims())


def corners(space: Space, results: Results) -> dict[str, dict[str, Any]]:
    """The largest and smallest subnet's name and top-1 among ``results``."""
    return {
        key: {"name": name, "top1": v["top1"]}
        for name, v in results.items()
        for key, arch in (("largest", space.max_arch()), ("smallest", space.min_arch()))
        if arch_from_dict(space, v["arch"]) == arch
    }


class PSReport:
    """The rows and console lines of one progressive-shrinking run."""

    def __init__(self, recipe: Recipe, session: TrainingSession) -> None:
        self.recipe, self.session = recipe, session

    def _where(self, p: int) -> dict[str, Any]:
        return {"phase": self.recipe.phases[p].name, "phase_index": p}

    def epoch(self, p: int, epoch: int, global_epoch: int, noise: dict[str, float] | None) -> None:
        phase, s = self.recipe.phases[p], self.session
        row = {
            "kind": "epoch",
            **self._where(p),
            "epoch": epoch + 1,
            "epochs": phase.total_epochs,
            "global_epoch": global_epoch,
            **s.epoch_figures(),
            "noise_scale": noise,
        }
        s.metrics.write(row)
        noise_text = f", B_simple {noise['b_simple']:.0f}" if noise and noise["b_simple"] else ""
        s.log(
            f"{phase.name} epoch {epoch + 1}/{phase.total_epochs}: loss {row['loss']:.4f}, lr {s.last_lr:.3g}"
            f"{noise_text}, {row['seconds']:.1f} s"
        )

    def evaluation(self, p: int, epoch: int, global_epoch: int, results: Results) -> None:
        s = self.session
        where = {**self._where(p), "epoch": epoch + 1, "global_epoch": global_epoch}
        s.metrics.write({"kind": "eval", "split": "val", **where, "step": s.pos.global_step, "subnets": results})
        s.log(f"{where['phase']} val top-1: " + ", ".join(f"{n} {v['top1']:.1f}" for n, v in results.items()))

    def phase_end(self, p: int, noise: dict[str, float] | None) -> None:
        s = self.session
        row = {"kind": "phase", **self._where(p), "step": s.pos.global_step, "elapsed_s": s.pos.elapsed}
        s.metrics.write({**row, "noise_scale": noise})
        if noise:  # what the phase's noise scale says about the global batch (issue 17)
            advice = batch_advice(s.global_batch, noise["b_simple"], len(s.data.train))
            s.log(f"{row['phase']}: {advice}")

    def test(self, results: Results, summary: dict[str, dict[str, Any]]) -> None:
        pos = self.session.pos
        self.session.metrics.write(
            {
                "kind": "test",
                "split": "test",
                "step": pos.global_step,
                "subnets": results,
                **summary,
                "elapsed_s": pos.elapsed,
                "cpu_s": pos.elapsed_cpu,
            }
        )
