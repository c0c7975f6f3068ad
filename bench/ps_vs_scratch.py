"""Progressive shrinking vs training from scratch: test top-1 of three subnets, both ways.

Trains the supernet with RECIPE (or takes a trained one with --supernet), then trains the
smallest, a middle and the largest subnet as ordinary timm networks from scratch for the same
total number of epochs (the recipe's optimizer, first-phase learning rate and warmup, cosine,
same batch size and augmentation, no distillation, at the subnet's resolution) and evaluates all
six on the test split (supernet subnets after BN recalibration).

    python bench/ps_vs_scratch.py [RECIPE] [--out DIR] [--supernet PATH] [--set KEY=VALUE ...] [--json]

Works with any recipe: digits by default, or one pointing at a torchvision dataset on disk.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ofa.arch import Arch
from ofa.bn import resize
from ofa.data import LoaderOptions, build_data, make_loader, set_loader_epoch
from ofa.encoding import sample_arch
from ofa.errors import OFAError
from ofa.evaluate import evaluate, evaluate_arch
from ofa.space import SearchSpace
from ofa.subnet import build_subnet
from ofa.supernet import OFAMobileNetV3
from ofa.train import Recipe, load_recipe, train
from ofa.train.optim import build_optimizer, lr_at, set_lr
from ofa.train.recipe import PhaseConfig

ROOT = Path(__file__).resolve().parents[1]
TARGET_POINTS = 0.5  # every progressive-shrinking subnet within this of its from-scratch twin, or better


def middle_arch(space: SearchSpace, seed: int = 0, candidates: int = 1000) -> Arch:
    """A subnet halfway between the smallest and the largest, in log MACs (from seeded samples)."""
    target = math.sqrt(space.macs(space.min_arch()) * space.macs(space.max_arch()))
    rng = np.random.default_rng(seed)
    archs = [sample_arch(space, rng) for _ in range(candidates)]
    return min(archs, key=lambda a: abs(math.log(space.macs(a) / target)))


def train_from_scratch(recipe: Recipe, arch: Arch, data, epochs: int, desc: str) -> torch.nn.Module:
    """The static timm subnet trained alone with the recipe's optimizer settings."""
    torch.manual_seed(recipe.seed)
    model = build_subnet(recipe.space, arch)
    first = recipe.phases[0]
    schedule = PhaseConfig(name="scratch", epochs=epochs - first.warmup_epochs, warmup_epochs=first.warmup_epochs,
                           lr=first.lr)
    optimizer = build_optimizer(model, recipe.optimizer, first.lr)
    loader = make_loader(data.train, recipe.data.batch_size, shuffle=True, seed=recipe.seed, drop_last=True,
                         options=LoaderOptions(num_workers=recipe.data.num_workers))
    steps = len(loader)
    model.train()
    with tqdm(total=epochs * steps, desc=desc, unit="step", leave=False) as bar:
        for epoch in range(epochs):
            set_loader_epoch(loader, epoch)
            for i, (x, y) in enumerate(loader):
                set_lr(optimizer, lr_at(epoch * steps + i, steps, schedule, recipe.schedule))
                loss = F.cross_entropy(model(resize(x, arch.resolution)), y,
                                       label_smoothing=recipe.optimizer.label_smoothing)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if recipe.optimizer.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.optimizer.grad_clip)
                optimizer.step()
                bar.update()
    return model


def run(args: argparse.Namespace) -> dict:
    recipe = load_recipe(args.recipe, args.set)
    out = Path(args.out) if args.out else ROOT / "runs" / f"bench-{Path(args.recipe).stem}"
    start = time.perf_counter()
    ps_seconds = None
    if args.supernet:
        supernet = Path(args.supernet)
    elif (out / "supernet.pt").exists():
        supernet = out / "supernet.pt"
        print(f"reusing {supernet} (delete it to train again)", file=sys.stderr)
    else:  # resume=True: an interrupted benchmark continues where it stopped
        supernet = train(recipe, out, resume=True)
        ps_seconds = time.perf_counter() - start
    net = OFAMobileNetV3.load(supernet)
    if net.space != recipe.space:
        raise OFAError(f"{supernet}: its search space is not the one of {args.recipe}")
    data = build_data(recipe.data)
    calib = make_loader(data.train, recipe.data.batch_size, shuffle=True, seed=recipe.seed + 1)
    test = make_loader(data.test, recipe.data.eval_batch_size, shuffle=False, seed=0)
    epochs = sum(p.total_epochs for p in recipe.phases)
    space = recipe.space
    results = {}
    subnets = {"smallest": space.min_arch(), "middle": middle_arch(space, recipe.seed), "largest": space.max_arch()}
    ps = {}
    for name, arch in subnets.items():
        set_loader_epoch(calib, 0)  # BN calibration images as the trainer's evaluations use them
        ps[name] = evaluate_arch(net, arch, calib, test, recipe.eval.calib_batches)["top1"]
    for name, arch in subnets.items():
        t0 = time.perf_counter()
        model = train_from_scratch(recipe, arch, data, epochs, f"scratch {name}")
        scratch = evaluate(model, test, arch.resolution)["top1"]
        results[name] = {"arch": arch.to_dict(), "params": space.params(arch), "macs": space.macs(arch),
                         "ps_top1": ps[name], "scratch_top1": scratch, "delta": ps[name] - scratch,
                         "scratch_seconds": time.perf_counter() - t0}
    return {"recipe": str(args.recipe), "supernet": str(supernet), "total_epochs": epochs,
            "ps_train_seconds": ps_seconds, "test_images": len(data.test), "subnets": results,
            "target_points": TARGET_POINTS,
            "within_target": all(r["delta"] >= -TARGET_POINTS for r in results.values())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", nargs="?", default=str(ROOT / "recipes" / "digits.yaml"))
    p.add_argument("--out", help="run folder for the supernet (default runs/bench-RECIPE)")
    p.add_argument("--supernet", help="use this trained supernet instead of training one")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe value")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = p.parse_args(argv)
    try:
        report = run(args)
    except OFAError as exc:
        print(f"ps_vs_scratch: error: {exc}", file=sys.stderr)
        return 2
    print(f"{report['recipe']}: {report['total_epochs']} epochs each way, {report['test_images']} test images")
    print(f"{'subnet':<9} {'params':>8} {'MMACs':>7} {'PS top-1':>9} {'scratch':>8} {'PS-scratch':>10}")
    for name, r in report["subnets"].items():
        print(f"{name:<9} {r['params']:>8,} {r['macs'] / 1e6:>7.2f} {r['ps_top1']:>9.2f} {r['scratch_top1']:>8.2f} "
              f"{r['delta']:>+10.2f}")
    verdict = "yes" if report["within_target"] else "no"
    print(f"every PS subnet within {TARGET_POINTS} points of scratch or better: {verdict}")
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
