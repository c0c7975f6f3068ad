"""Data-parallel steps of the ResNet supernet: the trainer's gradient average against a whole-gradient one.

Two gloo ranks on this machine (one thread each) step the OFA-ResNet50 supernet (per-rank batch 8, resolution 128,
SGD over what a step used, as the ResNet recipes train) at the largest, a middle and the smallest subnet
(`bench.elastic_overhead`'s three). Each rank holds two copies of it: one averages its gradients as the trainer
does (`ofa.train.distributed.average_gradients`: each corner buffer's written corner alone, and the buffers stay
tracked), the other all-reduces every active weight's full-size gradient and writes it back whole, as the
trainer did before, which leaves every corner buffer to be cleared whole at its next use. Within a round the two
alternate which goes first; ``ratio_*`` is the median of the per-round step-time ratios (trainer's / whole), and
``step_ms`` each one's median step (forward, backward, average and update; the ranks keep in step at the
all-reduce).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench.common import last_json
from bench.elastic_overhead import three_subnets
from bench.step_timing import SGD_SETTINGS, report, sgd_step
from ofa.families.registry import family_of
from ofa.train.distributed import DistEnv, average_gradients, process_group
from ofa.train.launch import free_port, rank_environment
from ofa.train.used_sgd import UsedWeightsSGD
from search.latency import space_from_arg

WORLD = 2


def average_whole(params: list[torch.nn.Parameter], env: DistEnv) -> None:
    """Every gradient all-reduced and written back whole (the baseline)."""
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat)
    for g, averaged in zip(grads, flat.div_(env.world_size).split([g.numel() for g in grads])):
        g.copy_(averaged.view_as(g))


AVERAGES = {"trainer": average_gradients, "whole": average_whole}


def _rank(rank: int, args: argparse.Namespace, port: int, out: str) -> None:
    torch.set_num_threads(1)
    rank_environment(rank, WORLD, port)
    with process_group("cpu") as env:
        times, subnets = measure(env, args)
    if rank == 0:
        Path(out).write_text(summary(times, subnets))


def measure(env: DistEnv, args: argparse.Namespace) -> tuple[dict[str, list[float]], list[str]]:
    """Each step's seconds, keyed ``{average}_{subnet}``, over ``args.rounds`` rounds after a warm-up one."""
    space = space_from_arg("ofa_resnet50")
    nets = {}
    for name in AVERAGES:
        torch.manual_seed(0)
        net = family_of(space).supernet_type(space).train()
        opt = UsedWeightsSGD(net, net.parameters(), **SGD_SETTINGS)
        params = list(net.parameters())
        opt.register_step_pre_hook(lambda *_, average=AVERAGES[name], params=params: average(params, env))
        nets[name] = (net, opt)  # its step averages the gradients over the ranks first, as the trainer's does
    torch.manual_seed(1 + env.rank)  # each rank its own batch
    batch = torch.randn(args.batch, space.in_channels, args.resolution, args.resolution)
    batch = batch, torch.randint(0, space.num_classes, (args.batch,))
    subnets = three_subnets(space, args.resolution)
    times = {f"{name}_{subnet}": [] for subnet in subnets for name in AVERAGES}
    for r in range(args.rounds + 1):  # one warm-up round
        for subnet, arch in subnets.items():
            for name in list(AVERAGES)[:: 1 if r % 2 else -1]:
                net, opt = nets[name]
                net.set_active(arch)
                step = sgd_step(net, opt, *batch)
                if r:
                    times[f"{name}_{subnet}"].append(step.total)
    return times, list(subnets)


def summary(times: dict[str, list[float]], subnets: list[str]) -> str:
    """The JSON result: each subnet's median per-round ratio and each step's median milliseconds."""
    result: dict[str, object] = {}
    for subnet in subnets:
        ratios = [a / b for a, b in zip(times[f"trainer_{subnet}"], times[f"whole_{subnet}"])]
        result[f"ratio_{subnet}"] = round(statistics.median(ratios), 3)
    result["step_ms"] = {key: round(statistics.median(v) * 1000, 1) for key, v in times.items()}
    return json.dumps(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8, help="images per rank")
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        mp.start_processes(_rank, args=(args, free_port(), str(out)), nprocs=WORLD, start_method="spawn")
        result = last_json(out.read_text())
    result.update(ranks=WORLD, threads_per_rank=1, batch_per_rank=args.batch, resolution=args.resolution)
    report(result, args.json)


if __name__ == "__main__":
    main()
