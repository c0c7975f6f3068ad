"""The runs of the progressive-shrinking benchmarks, each trained once and cached as JSON by a digest.

A supernet run (`ps_run`) trains a recipe (resuming from its last checkpoint) and evaluates named
subnets of it on the validation and the test split; a scratch run (`scratch_run`) trains one subnet
alone as an ordinary timm network with the recipe's optimizer settings, checkpointed at every epoch's
end. Each record holds its figures and its cost (process CPU seconds and wall seconds), so a rerun
reads it instead of training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ofa.data.datasets import DataBundle
from ofa.data.loaders import make_loader
from ofa.families.family import Arch
from ofa.families.registry import family_of, load_supernet
from ofa.train import Recipe, train
from ofa.train.bn import CalibrationBatches, resize
from ofa.train.distributed import DistEnv
from ofa.train.evaluate import evaluate, evaluate_arch
from ofa.train.recipe import CheckpointConfig, PhaseConfig
from ofa.train.session import SessionConfig, TrainingSession, apply_gradients
from ofa.utils.errors import OFAError
from ofa.utils.io import read_json, write_json
from ofa.utils.tracking import LoggingConfig

SPLITS = ("val", "test")


def digest(obj: Any) -> str:
    """Short stable hash of a JSON-able object (the cache key)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def recipe_digest(recipe: Recipe) -> str:
    """The key of a supernet run: the recipe's training sections (``Recipe.training_dict``)."""
    return digest(recipe.training_dict())


def cached(path: Path, compute) -> dict[str, Any]:
    """The JSON at ``path``, or ``compute()`` written there first."""
    if path.is_file():
        return read_json(path, "cached benchmark run")
    result = compute()
    write_json(path, result)
    return result


def read_cached(path: Path) -> dict[str, Any] | None:
    return read_json(path, "cached benchmark run") if path.is_file() else None


# ------------------------------------------------------------------------------ progressive shrinking
def ps_images(recipe: Recipe, train_images: int) -> dict[str, int]:
    """Images read and subnet forward/backward passes x images of a whole supernet run."""
    batch = recipe.data.batch_size
    steps = train_images // batch
    read = sum(p.total_epochs for p in recipe.phases) * steps * batch
    passes = sum(p.total_epochs * p.subnets_per_step for p in recipe.phases) * steps * batch
    return {"images_read": read, "train_images": passes}


def evaluate_supernet(
    path: Path, recipe: Recipe, subnets: dict[str, Arch], data: DataBundle, splits: tuple[str, ...] = SPLITS
) -> dict[str, Any]:
    """Top-1 of each subnet of the supernet at ``path`` on each of ``splits`` (BN recalibrated on training
    images)."""
    net = load_supernet(path)
    calib = CalibrationBatches(make_loader(data.calib, recipe.data.batch_size, shuffle=True, seed=recipe.seed + 1))
    top1: dict[str, dict[str, float]] = {split: {} for split in splits}
    for split in splits:
        loader = make_loader(getattr(data, split), recipe.data.eval_batch_size, shuffle=False, seed=0)
        for name, arch in subnets.items():
            top1[split][name] = evaluate_arch(net, arch, calib, loader, recipe.eval.calib_batches)["top1"]
    return {f"{split}_top1": top1[split] for split in splits}


def ps_eval_path(cache: Path, key: str, subnets: dict[str, Arch]) -> Path:
    archs = {n: a.to_dict() for n, a in subnets.items()}
    return cache / f"ps-{key}" / f"eval-{digest({'archs': archs, 'splits': list(SPLITS)})}.json"


def ps_run(
    recipe: Recipe, subnets: dict[str, Arch], data: DataBundle, cache: Path, key: str | None = None
) -> dict[str, Any]:
    """Train (or resume, or reuse) the supernet of ``recipe`` and evaluate every subnet taken from it.

    ``key`` names the run where the recipe's digest would not (a run that starts from a cached supernet)."""
    key = key or recipe_digest(recipe)
    run_dir = cache / f"ps-{key}"

    def compute() -> dict[str, Any]:
        path = run_dir / "supernet.pt" if (run_dir / "supernet.pt").exists() else train(recipe, run_dir, resume=True)
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        final = next(r for r in reversed(rows) if r["kind"] == "test")
        return {
            "kind": "ps",
            "seed": recipe.seed,
            "recipe_digest": key,
            "seconds": final["elapsed_s"],
            "cpu_seconds": final["cpu_s"],
            **evaluate_supernet(path, recipe, subnets, data),
            **ps_images(recipe, len(data.train)),
            "archs": {n: a.to_dict() for n, a in subnets.items()},
        }

    return cached(ps_eval_path(cache, key, subnets), compute)


# ------------------------------------------------------------------------------ from scratch
@dataclass(frozen=True)
class ScratchRun:
    """One subnet trained alone."""

    arch: Arch
    lr: float
    epochs: int
    seed: int

    def key(self, recipe: Recipe) -> str:
        r = recipe.to_dict()
        return digest(
            {
                "space": r["space"],
                "data": r["data"],
                "optimizer": r["optimizer"],
                "schedule": r["schedule"],
                "warmup": recipe.phases[0].warmup_epochs,
                "arch": self.arch.to_dict(),
                "lr": self.lr,
                "epochs": self.epochs,
                "seed": self.seed,
            }
        )


@dataclass
class Trained:
    """A scratch run's trained model and what its training cost, summed over every resumed piece."""

    model: torch.nn.Module
    seconds: float
    cpu_seconds: float


def train_from_scratch(recipe: Recipe, run: ScratchRun, data: DataBundle, desc: str, folder: Path) -> Trained:
    """The static timm subnet trained alone with the recipe's optimizer settings.

    Checkpointed in ``folder`` at each epoch's end and resumed from its newest checkpoint, to the same
    weights as an uninterrupted run: a long twin (hundreds of epochs) outlives the process that started it.
    """
    torch.manual_seed(run.seed)
    model = family_of(recipe.space).build_subnet(recipe.space, run.arch)
    warmup = min(recipe.phases[0].warmup_epochs, run.epochs - 1)
    schedule = PhaseConfig(name="scratch", epochs=run.epochs - warmup, warmup_epochs=warmup, lr=run.lr)
    # The grid's learning rates are used as they are: no scaling by optimizer.lr_reference_batch.
    optim = dataclasses.replace(recipe.optimizer, lr_reference_batch=None)
    cfg = SessionConfig(
        recipe.data, optim, run.seed, recipe.source, CheckpointConfig(every_steps=0), LoggingConfig(tensorboard=False)
    )
    session = TrainingSession(cfg, DistEnv.single_process(), folder, data=data)
    optimizer = session.new_optimizer(model, run.lr)
    identity = {"kind": "scratch", "arch": run.arch.to_dict(), "lr": run.lr, "epochs": run.epochs, "seed": run.seed}

    def step(epoch: int, i: int, x: torch.Tensor, y: torch.Tensor) -> float:
        session.schedule_lr(optimizer, schedule, recipe.schedule, epoch, i)
        logits = model(resize(x, run.arch.resolution))
        loss = F.cross_entropy(logits, y, label_smoothing=recipe.optimizer.label_smoothing)
        apply_gradients(loss, model, optimizer, recipe.optimizer.grad_clip)
        return loss.item()

    def load(state: dict[str, Any]) -> None:
        if state["meta"].get("scratch") != identity:
            raise OFAError(f"{folder}: its checkpoints are of another scratch run ({state['meta']}): delete it")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        session.restore(state)

    model.train()
    with session.opened(True, load):
        for epoch in range(session.pos.epoch, run.epochs):
            session.run_epoch(epoch, f"{desc} {epoch + 1}/{run.epochs}", partial(step, epoch))
            session.tick()
            session.metrics.write({"kind": "epoch", "epoch": epoch + 1, **session.epoch_figures()})
            session.next_epoch()
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "meta": {"scratch": identity}}
            session.save({**state, "space": recipe.space.to_dict()})
    session.tick()
    return Trained(model, session.pos.elapsed, session.pos.elapsed_cpu)


def scratch_run(recipe: Recipe, run: ScratchRun, data: DataBundle, cache: Path, desc: str) -> dict[str, Any]:
    """Validation and test top-1, seconds and images of one cached from-scratch run (its checkpoints, kept
    in ``cache/scratch-KEY/`` while it trains, are removed once its record is written)."""
    key = run.key(recipe)
    folder = cache / f"scratch-{key}"

    def compute() -> dict[str, Any]:
        trained = train_from_scratch(recipe, run, data, desc, folder)
        val = make_loader(data.val, recipe.data.eval_batch_size, shuffle=False, seed=0)
        test = make_loader(data.test, recipe.data.eval_batch_size, shuffle=False, seed=0)
        images = run.epochs * (len(data.train) // recipe.data.batch_size) * recipe.data.batch_size
        return {
            "kind": "scratch",
            "key": key,
            "arch": run.arch.to_dict(),
            "lr": run.lr,
            "epochs": run.epochs,
            "seed": run.seed,
            "seconds": trained.seconds,
            "cpu_seconds": trained.cpu_seconds,
            "train_images": images,
            "val_top1": evaluate(trained.model, val, run.arch.resolution)["top1"],
            "test_top1": evaluate(trained.model, test, run.arch.resolution)["top1"],
        }

    record = cached(cache / f"scratch-{key}.json", compute)
    shutil.rmtree(folder, ignore_errors=True)
    return record


def scratch_record(recipe: Recipe, run: ScratchRun, cache: Path) -> dict[str, Any] | None:
    """The cached record of ``run``, or None when it has not been trained."""
    return read_cached(cache / f"scratch-{run.key(recipe)}.json")
