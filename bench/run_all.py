"""Run the benchmarks, collect the JSON object each prints last, write bench/RESULTS.md and README's results.

Each benchmark runs in its own process (``python -m bench.NAME`` from the repository root), one after
the other, so none competes with another for the CPU. Results are kept in bench/data/results.json:
``--only NAME`` reruns a subset and keeps the other entries; an entry whose command is no longer the
benchmark's command is kept, marked stale with its date and old command, until the new command runs,
and a rerun that fails keeps the figures it would have replaced, marked stale with the failure: no
row is dropped silently. RESULTS.md is rendered from all entries, and README.md's results table
(between the ``results:begin`` / ``results:end`` markers) is copied from the same entries, so no figure
there is typed by hand. ``--quick`` uses smaller settings and writes neither file; ``--render`` runs
nothing and writes RESULTS.md and README's table again from the stored entries. Long benchmarks run
only when named (the progressive-shrinking ones cache their finished runs, so a rerun resumes).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import DATA, ROOT, last_json
from bench.int8_search_report import render as int8_search_render
from bench.ps_rules import ladder_text
from bench.search_quality_report import markdown as search_quality_markdown
from ofa.lut.pack_readme import TOOLS
from ofa.utils.io import write_json, write_text
from ofa.utils.machine import cpu_name

README_BEGIN, README_END = "<!-- results:begin -->", "<!-- results:end -->"


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its command, what its figures mean, and which of them README shows."""

    command: list[str]
    meaning: str
    quick: list[str]
    readme: dict[str, str] = field(default_factory=dict)  # result key -> label in README's table
    on_request: bool = False  # long: runs only with --only NAME


def critical_batch_bench(recipe: str, args: list[str], meaning: str) -> Benchmark:
    """`bench.critical_batch` on one recipe; its quick form is a 3-batch smoke run to an easy target."""
    quick = ["--batches", "32", "64", "128", "--target", "1.5", "--max-epochs", "1", "--noise-steps", "2"]
    png = f"runs/bench/critical_batch_{Path(recipe).stem}_quick.png"
    return Benchmark(
        ["-m", "bench.critical_batch", recipe, *args, "--json"],
        meaning,
        ["-m", "bench.critical_batch", recipe, "--json", *quick, "--noise-accumulate", "4", "--out", png],
        {
            "b_crit": "B_crit",
            "b_simple": "B_simple",
            "ratio": "B_crit / B_simple",
            "ratio_low": "68% from",
            "ratio_high": "to",
        },
        on_request=True,
    )


FASHION_QUICK = ["--set", "data.train_subset=2000", "--set", "data.val_size=1000", "--set", "data.test_subset=1000"]
CROP_FLIP = ["--set", "data.augment=crop_flip"]
AUGMENTED_TWINS = ["--subnets", "smallest", "middle", "largest"]  # the capped study's twins


def ps_bench(recipe: str, args: list[str], quick_args: list[str], meaning: str) -> Benchmark:
    """`bench.ps_vs_scratch` on one recipe; its quick form trains one seed of the corner subnets, one lr."""
    module = ["-m", "bench.ps_vs_scratch", "--recipe", recipe]
    quick = ["--seeds", "0", "--random", "0", "--lr-factors", "1", "--no-convergence", *quick_args]
    return Benchmark(
        [*module, *args, "--json"],
        meaning,
        [*module, *quick, "--json"],
        {
            "within_target": "every subnet within 0.5 points (test)",
            "cpu_ratio": "PS / largest twin at its converged epochs, CPU s measured here",
            "scratch_converged": "twins converged",
            "lr_at_edge": "lr at a grid edge",
        },
        on_request=True,
    )


def lut_check_bench(
    table: str, n: int, extra: list[str], meaning: str, resolutions: tuple[int, int] = (160, 224)
) -> Benchmark:
    """``ofa lut check`` of a shipped table at two resolutions; the quick form checks 5 subnets."""
    out = f"runs/bench/lut_check/{Path(table).stem}"

    def command(subnets: int) -> list[str]:
        return ["-m", "ofa", "lut", "check", f"latency_tables/{table}", "--resolutions", *map(str, resolutions),
                "--n", str(subnets), *extra, "--json", "--quiet", "--out", out]  # fmt: skip

    return Benchmark(
        command(n),
        meaning,
        command(5),
        {"within_10pct": "share within ±10%", "mape": "MAPE", "spearman": "Spearman"},
        on_request=True,
    )


def official_bench(module: str, args: list[str], meaning: str, quick: list[str] | None = None) -> Benchmark:
    """`bench.official_import` or `bench.official_overhead` (``module``) with ``args``; its quick form is
    ``quick`` (default: the same command)."""
    readme = {"overhead_max": "largest subnet", "overhead_mid": "middle", "overhead_min": "smallest"}
    if module == "official_import":
        readme = {"max_abs_diff": "max abs logit diff", "max_abs_diff_onnx": "ONNX"}
    command = ["-m", f"bench.{module}", "--json", *args]
    quick_command = command if quick is None else ["-m", f"bench.{module}", "--json", *quick]
    return Benchmark(
        command, meaning, quick_command, {**readme, "skipped": "skipped"}, on_request=module != "official_import"
    )


BENCHMARK_APP = TOOLS["openvino"]  # (what, command, regex) as a pack's README gives it
# The search benches measured the Fashion-MNIST supernet trained with the recipe's former 1+40-epoch elastic
# phase (hours of cached measurements); the recipe now ships 1+20 (issue 31), so their commands pin the former.
PINNED_FASHION_SUPERNET = ("--set", "phases.elastic.epochs=40")


BENCHMARKS: dict[str, Benchmark] = {
    "elastic_overhead": Benchmark(
        ["-m", "bench.elastic_overhead", "--json", "--invocations", "3"],
        "one SGD step of the supernet / the extracted static model, largest, middle (median MACs of 1,000 "
        "seeded samples) and smallest subnet: in each of 3 processes the median of per-round ratios; the "
        "median of the 3 and each one (target ≤ 1.03). The static model is timm's, whose depthwise convs from "
        "kernel 5 take oneDNN's slow weight gradient on the CPU (the depthwise_grad row): below 1, the supernet's "
        "step is the faster; elastic_overhead_same_ops counts elasticity alone",
        ["-m", "bench.elastic_overhead", "--json", "--rounds", "5"],
        {
            "overhead_max": "largest subnet",
            "overhead_max_runs": "runs",
            "overhead_mid": "middle",
            "overhead_mid_runs": "runs",
            "overhead_min": "smallest",
            "overhead_min_runs": "runs",
        },
    ),
    "elastic_overhead_proxyless": Benchmark(
        ["-m", "bench.elastic_overhead", "--json", "--invocations", "3", "--space", "proxyless", "--same-ops"],
        "as elastic_overhead, on the published OFA-ProxylessNAS w1.3 space against its static timm EfficientNet "
        "twin with the supernet's depthwise conv (--same-ops; no squeeze-excite: nothing but elasticity differs)",
        ["-m", "bench.elastic_overhead", "--json", "--rounds", "5", "--space", "proxyless", "--same-ops"],
        {"overhead_max": "largest subnet", "overhead_mid": "middle", "overhead_min": "smallest"},
    ),
    "elastic_overhead_resnet": Benchmark(
        ["-m", "bench.elastic_overhead", "--json", "--invocations", "7", "--rounds", "11", "--space", "ofa_resnet50"],
        "as elastic_overhead on the published OFA-ResNet50 space: supernet SGD step / its static timm ByobNet "
        "twin's, largest, middle and smallest subnet, 11 rounds per process, median of 7 processes (one process's "
        "figure moves by as much as the target's margin; target ≤ 1.05), the supernet's SGD "
        "updating every active weight whole (optimizer.update: all, the paper's rule)",
        ["-m", "bench.elastic_overhead", "--json", "--rounds", "3", "--space", "ofa_resnet50"],
        {"overhead_max": "largest subnet", "overhead_mid": "middle", "overhead_min": "smallest"},
        on_request=True,
    ),
    "elastic_overhead_resnet_used": Benchmark(
        [
            "-m",
            "bench.elastic_overhead",
            "--json",
            "--invocations",
            "7",
            "--rounds",
            "11",
            "--space",
            "ofa_resnet50",
            "--update",
            "used",
        ],
        "as elastic_overhead_resnet (target ≤ 1.05), the supernet's SGD updating only what the step used "
        "(optimizer.update: used, the rule the ResNet recipes train with: the update_rule row)",
        ["-m", "bench.elastic_overhead", "--json", "--rounds", "3", "--space", "ofa_resnet50", "--update", "used"],
        {"overhead_max": "largest subnet", "overhead_mid": "middle", "overhead_min": "smallest"},
        on_request=True,
    ),
    "rank_average_resnet": Benchmark(
        ["-m", "bench.rank_average", "--json", "--rounds", "5"],
        "2 gloo ranks (one thread each) stepping the OFA-ResNet50 supernet at the largest, middle and smallest "
        "subnet (batch 8 per rank, 128 px, optimizer.update: used): step time with the trainer's gradient "
        "average (each corner buffer's written corner, buffers kept tracked) / with every full-size gradient "
        "all-reduced and written back (as before), median of per-round ratios (< 1: the trainer's is faster)",
        ["-m", "bench.rank_average", "--json", "--rounds", "1"],
        {"ratio_max": "largest subnet", "ratio_mid": "middle", "ratio_min": "smallest"},
        on_request=True,
    ),
    "elastic_overhead_same_ops": Benchmark(
        ["-m", "bench.elastic_overhead", "--json", "--invocations", "3", "--same-ops"],
        "as elastic_overhead, but the static twin runs the supernet's own op code where it differs from timm's: "
        "squeeze-excite (matmuls on the pooled vector, not 1x1 convolutions) and the depthwise conv (its CPU "
        "backward as forward convolutions): what elasticity alone costs (before 2026-12-05: elastic_overhead_same_se, "
        "the squeeze-excite code alone)",
        ["-m", "bench.elastic_overhead", "--json", "--rounds", "5", "--same-ops"],
        {"overhead_max": "largest subnet", "overhead_mid": "middle", "overhead_min": "smallest"},
    ),
    "depthwise_grad": Benchmark(
        ["-m", "bench.depthwise_grad", "--json"],
        "a depthwise conv's backward (input and weight gradients) on the CPU, aten's (oneDNN) / "
        "ofa.families.depthwise_grad's, per shape (batch x channels x size x kernel x stride): the digits "
        "supernet's blocks and ImageNet-size blocks at 128 px; the supernets take it from kernel 5 up",
        ["-m", "bench.depthwise_grad", "--json", "--rounds", "3"],
        {"speedup_min_fast_path": "least speed-up, kernels from 5"},
    ),
    "elastic_breakdown": Benchmark(
        ["-m", "bench.elastic_breakdown", "--json", "--invocations", "3"],
        "where the smallest subnet's overhead goes: SGD step / the static twin's for four models that compute "
        "the same function, each adding one part of the supernet (its SE code, its block code with nothing "
        "elastic, elastic widths and depths, kernel transforms); part_* = differences of successive ratios; "
        "101 rounds in each of 3 processes, each round in a fresh seeded order",
        ["-m", "bench.elastic_breakdown", "--json", "--rounds", "3"],
        {
            "part_se_code": "SE code",
            "part_block_code": "block code",
            "part_elastic_widths_depths": "elastic widths and depths",
            "part_kernel_transforms": "kernel transforms",
        },
        on_request=True,
    ),
    "official_overhead": official_bench(
        "official_overhead",
        ["--invocations", "3"],
        "the official OFA code timed as elastic_overhead times ours (its supernet's SGD step / its "
        "get_active_subnet model's, same three subnets, 3 processes); needs the official wheel in runs/official "
        "(see the script)",
        ["--invocations", "1", "--rounds", "3"],
    ),
    "official_overhead_proxyless": official_bench(
        "official_overhead",
        ["--invocations", "3", "--space", "proxyless"],
        "as official_overhead, the official OFAProxylessNASNets w1.3 on elastic_overhead_proxyless's three subnets",
        ["--invocations", "1", "--rounds", "3", "--space", "proxyless"],
    ),
    "official_overhead_resnet": official_bench(
        "official_overhead",
        ["--invocations", "7", "--rounds", "11", "--space", "ofa_resnet50"],
        "as official_overhead, the official OFAResNets (ofa_resnet50) on elastic_overhead_resnet's three subnets, "
        "11 rounds per process, 7 processes",
        ["--invocations", "1", "--rounds", "3", "--space", "ofa_resnet50"],
    ),
    "search_speed": Benchmark(
        ["-m", "bench.search_speed", "--json"],
        "seconds of one default OFA evolutionary search on the mbv3 table (target ≤ 1 s), "
        "and its result vs the best of 10,000 random feasible subnets",
        ["-m", "bench.search_speed", "--json"],
        {"seconds": "seconds", "found_top1": "found top-1", "random_best_top1": "best random top-1"},
    ),
    "search_speed_proxyless": Benchmark(
        ["-m", "bench.search_speed", "--json", "--space", "proxyless"],
        "as search_speed, on the published OFA-ProxylessNAS w1.3 space and its table (target ≤ 1 s)",
        ["-m", "bench.search_speed", "--json", "--space", "proxyless"],
    ),
    "search_speed_resnet": Benchmark(
        ["-m", "bench.search_speed", "--json", "--space", "ofa_resnet50"],
        "as search_speed on the published OFA-ResNet50 space (its table in latency_tables/, else a synthetic "
        "cost; target ≤ 1 s)",
        ["-m", "bench.search_speed", "--json", "--space", "ofa_resnet50", "--random", "1000"],
        {"seconds": "seconds", "found_top1": "found top-1", "random_best_top1": "best random top-1"},
    ),
    "augment_speed": Benchmark(
        ["-m", "bench.augment_speed", "--json"],
        "per-image cost of the demo's augmented training split (augment: light), torchvision's RandomAffine "
        "chain against the project's split (kept resize + RandomAffineGrid), the same images, median of "
        "alternating rounds",
        ["-m", "bench.augment_speed", "--json", "--rounds", "1"],
        {"speedup": "speed-up", "torchvision_us_per_image": "torchvision µs/image", "ofa_us_per_image": "ofa µs/image"},
    ),
    "pipeline_demo": Benchmark(
        ["-m", "bench.pipeline_demo", "--json"],
        "`ofa pipeline recipes/digits.yaml` in a fresh folder: training, per-stage and pipeline wall time, test "
        "top-1 of the largest and smallest subnet (targets: pipeline ≤ 100 s, ≥ 98.5% / ≥ 97.5%), and per "
        "exported model its ONNX parity, test top-1 and predicted vs measured latency",
        ["-m", "bench.pipeline_demo", "--json"],
        {
            "train_seconds": "training s",
            "largest_top1": "largest top-1",
            "smallest_top1": "smallest top-1",
            "pipeline_seconds": "pipeline s",
            "parity_max_abs": "max ONNX parity diff",
        },
        on_request=True,
    ),
    "reference_every": Benchmark(
        ["-m", "bench.reference_every", "--json"],
        "the demo's table (recipes/digits.yaml's space and table settings) built with a reference block after every "
        "model block (1) and after every 2 (2, the recipe's), alternately, 3 rounds; each round's tables judged "
        "against one plain-loop timing (bench.standalone_latency's loop) of the same 40 random subnets: build "
        "seconds, share within ±10%, the tables' noise, and the plain loop's own test-retest",
        ["-m", "bench.reference_every", "--rounds", "1", "--n", "2", "--calls", "20", "--repeats", "2", "--json"],
        {},
        on_request=True,
    ),
    "pipeline_threads": Benchmark(
        ["-m", "bench.pipeline_threads", "--json"],
        "the demo's stages after training (collect, fit, search, export; the table given) with one torch thread "
        "(recipes/digits.yaml's pipeline.threads) and with torch's default, on an idle machine and beside a busy "
        "loop holding one core: seconds of the four stages, the median of 2 interleaved runs each, and the "
        "default's over one thread's",
        ["-m", "bench.pipeline_threads", "--repeat", "1", "--json"],
        {
            "idle_seconds": "idle s per thread count",
            "busy_seconds": "busy s per thread count",
            "idle_pool_over_one": "idle: default threads / one",
            "busy_pool_over_one": "busy: default threads / one",
        },
        on_request=True,
    ),
    "update_rule": Benchmark(
        ["-m", "bench.update_rule", "--json"],
        "the ResNet recipes' SGD rule chosen on validation only: recipes/digits_resnet.yaml's space and schedule on "
        "Fashion-MNIST without the sandwich rule (as the ImageNet ResNet recipe trains), each rule's seed-mean "
        "validation top-1 of the largest, smallest and random subnets; update: used (only what a step used) "
        "passes where each is at least the paper rule's (all) less one binomial standard error",
        ["-m", "bench.update_rule", "--json"],
        {"used_passes": "update: used passes the bar", "bar": "validation bar"},
        on_request=True,
    ),
    "digits_schedule": Benchmark(
        ["-m", "bench.digits_schedule", "--json"],
        "the demo's training schedule and teacher chosen on validation only (the row's seeds, each with its own "
        "train/validation partition of that many images): each candidate's image passes and the validation top-1 "
        "of the largest and smallest subnet and of seeded random ones (what the search exports lies between "
        "them); within the demo's training budget the best on validation of those within one binomial standard "
        "error of the former six-phase schedule (or above the demo's targets) is the recipe's, or where none is, "
        "the best of all, below the bar",
        ["-m", "bench.digits_schedule", "--json"],
        {"chosen": "chosen schedule", "chosen_passes": "chosen passes the bar", "bar": "validation bar"},
        on_request=True,
    ),
    "digits_calibration": Benchmark(
        ["-m", "bench.digits_calibration", "--json"],
        "the demo's BN calibration chosen on validation only: on the digits_schedule row's supernets of the recipe's "
        "schedule (its seeds and partitions), each candidate's training images (augmented as training reads them, "
        "or plain as evaluation does) and batch count, and the validation top-1 of the largest, smallest and "
        "seeded random subnets; the best mean is the recipe's (data.calib_augment, eval.calib_batches)",
        ["-m", "bench.digits_calibration", "--seeds", "0", "--json"],
        {"chosen": "chosen calibration", "chosen_settings": "its settings"},
        on_request=True,
    ),
    "fresh_clone": Benchmark(
        ["-m", "bench.fresh_clone", "--busy", "--repeat", "3", "--json"],
        "a new user's `make demo` (three fresh clones of the committed tree), `make test` (the first): install, demo "
        "pipeline (table built on this machine) and test seconds (targets on the reference machine: pipeline "
        "≤ 100 s, make test ≤ 3 min; install + demo ≤ 10 min on a machine 3× slower), the demo's test top-1 "
        "(largest ≥ 98.5%, smallest ≥ 97.5% on 360 images), the table's noise per resolution, and the demo's "
        "table stage again under a busy loop pinned to the measuring core (it must warn and still write)",
        ["-m", "bench.fresh_clone", "--no-test", "--json"],
        {
            "install_seconds": "install s",
            "demo_pipeline_seconds": "make demo s",
            "demo_stage_seconds": "its stages s",
            "test_seconds": "make test s",
            "test_passed": "passed",
            "largest_top1": "largest top-1",
            "smallest_top1": "smallest top-1",
            "busy_demo_exit": "busy demo exit",
            "demo_exits": "demo exits (3 clones)",
        },
        on_request=True,
    ),
    "lut_check_mbv3": lut_check_bench(
        "mbv3_ort-cpu_t1_b1.yaml",
        50,
        [],
        "shipped mbv3 table vs 50 measured whole subnets per resolution (target ≥ 90% within ±10%, "
        "Spearman ≥ 0.95 per resolution)",
    ),
    "lut_check_mbv3_int8": lut_check_bench(
        "mbv3_ort-cpu_int8_t1_b1.yaml",
        50,
        ["--time-budget", "2"],
        "an INT8 ONNX Runtime mbv3 table (every timed model quantized as export quantizes: QDQ U8S8, per-channel "
        "weights) vs 50 whole INT8 subnets per resolution, quantized the same way, each timed for up to 2 s (an "
        "INT8 subnet's calls vary more than a float32 one's: at the default 0.5 s their 95% intervals reached "
        "±6.5%) (target ≥ 90% within ±10%, Spearman ≥ 0.95 per resolution)",
    ),
    "lut_check_mbv3_openvino_int8": lut_check_bench(
        "mbv3_openvino-cpu_int8_t1_b1.yaml",
        50,
        ["--time-budget", "2"],
        "an INT8 OpenVINO (CPU plugin, 1 thread) mbv3 table (every timed model quantized by NNCF on synthetic "
        "batches) vs 50 whole INT8 subnets per resolution, quantized the same way, each timed for up to 2 s "
        "(target ≥ 90% within ±10%, Spearman ≥ 0.95 per resolution)",
    ),
    "lut_check_proxyless": lut_check_bench(
        "proxyless_ort-cpu_t1_b1.yaml",
        30,
        ["--time-budget", "2"],
        "OFA-ProxylessNAS w1.3 ONNX Runtime table vs 30 measured whole subnets per resolution, each timed for up "
        "to 2 s (at the default 0.5 s their 95% intervals reached ±5.7%, which a Spearman over 30 subnets of "
        "close latencies cannot see through) (target ≥ 95% within ±10%, Spearman ≥ 0.95 per resolution)",
    ),
    "lut_check_resnet": lut_check_bench(
        "ofa_resnet50_ort-cpu_t1_b1.yaml",
        30,
        [],
        "OFA-ResNet50 ONNX Runtime table (128 and 160 px, as the issue allows at ImageNet size) vs 30 measured "
        "whole subnets per resolution (target ≥ 95% within ±10%, Spearman ≥ 0.95 per resolution)",
        (128, 160),
    ),
    "lut_check_mbv3_openvino": lut_check_bench(
        "mbv3_openvino-cpu_t1_b1.yaml",
        30,
        [],
        "the same for the shipped OpenVINO (CPU plugin, 1 thread) mbv3 table, 30 subnets per resolution",
    ),
    "lut_check_mbv3_executorch": lut_check_bench(
        "mbv3_executorch-xnnpack_t1_b1.yaml",
        30,
        [],
        "the same for the shipped ExecuTorch (XNNPACK delegate, 1 thread) mbv3 table, 30 subnets per resolution",
    ),
    "lut_check_mbv3_benchmark_app": lut_check_bench(
        "mbv3_openvino-cpu-benchmark-app_t1_b1.yaml",
        30,
        ["--runner", BENCHMARK_APP[1], "--runner-regex", BENCHMARK_APP[2]],
        "a table timed by OpenVINO's own `benchmark_app` through `ofa lut build --runner` (160 and 224 px), "
        "judged against the same tool's timings of 30 whole subnets per resolution",
    ),
    "host_bursts": Benchmark(
        ["-m", "bench.host_bursts", "--json"],
        "how this host's timing noise comes: three mbv3 subnets (ONNX Runtime, 1 thread) timed in turn in 20 ms "
        "blocks for 30 s: each one's block spread (IQR / median), the spread of each one's ratio to the first "
        "one's block before it, and the calls' median wall / CPU time; then 8 subnets timed twice as one set by "
        "each estimator (quantile: each model's own q25; paired: ratios to a reference model), the median and "
        "largest test-retest difference",
        ["-m", "bench.host_bursts", "--json", "--seconds", "3", "--n", "3"],
        on_request=True,
    ),
    "standalone_latency": Benchmark(
        ["-m", "bench.standalone_latency", "--json"],
        "predicted latency vs a plain standalone wall-clock loop (30 warm-up calls, then the least median of 5 "
        "repeats of 100 timed session.run calls, the models taking repeats in turn: timeit's rule): the demo's "
        "exported models (runs/digits/export) and 8 random mbv3 subnets each at 160 and 224 px on the shipped "
        "table (target ≥ 90% within ±10% per group, table built on this machine), each "
        "subnet timed twice by the loop (the loop's own test-retest: the ceiling on this host)",
        ["-m", "bench.standalone_latency", "--json", "--n", "2", "--calls", "20", "--repeats", "2"],
        {
            "demo_within_10pct": "demo models within ±10%",
            "subnets_within_10pct": "mbv3 subnets within ±10%",
            "retest_within_10pct": "plain loop vs itself within ±10%",
        },
    ),
    **{
        f"standalone_latency_{name}": Benchmark(
            ["-m", "bench.standalone_latency", "--table", f"latency_tables/{table}", "--exports", "none", "--json"],
            f"the shipped {what} mbv3 table vs that runtime's own plain loop (30 warm-up calls, then the least "
            "median of 5 repeats of 100 timed calls), 8 random subnets each at 160 and 224 px (target ≥ 90% "
            "within ±10%)",
            [
                "-m",
                "bench.standalone_latency",
                "--table",
                f"latency_tables/{table}",
                "--exports",
                "none",
                "--json",
                "--n",
                "2",
                "--calls",
                "20",
                "--repeats",
                "2",
            ],
            {
                "subnets_within_10pct": "mbv3 subnets within ±10%",
                "subnets_mape": "MAPE",
                "retest_within_10pct": "plain loop vs itself within ±10%",
            },
            on_request=True,
        )
        for name, table, what in (
            ("openvino", "mbv3_openvino-cpu_t1_b1.yaml", "OpenVINO (CPU plugin)"),
            ("executorch", "mbv3_executorch-xnnpack_t1_b1.yaml", "ExecuTorch (XNNPACK)"),
            ("benchmark_app", "mbv3_openvino-cpu-benchmark-app_t1_b1.yaml", "OpenVINO benchmark_app"),
            ("int8", "mbv3_ort-cpu_int8_t1_b1.yaml", "ONNX Runtime INT8 (QDQ)"),
            ("openvino_int8", "mbv3_openvino-cpu_int8_t1_b1.yaml", "OpenVINO INT8 (NNCF)"),
        )
    },
    "official_import": official_bench(
        "official_import",
        [],
        "official OFA-MobileNetV3 checkpoints (w1.0 and w0.5 fixtures, 12 subnets each) imported: max abs "
        "logit difference of supernet and extracted timm subnets vs the official network (target ≤ 1e-5), and of "
        "their ONNX exports (target ≤ 1e-4)",
    ),
    "official_import_proxyless": official_bench(
        "official_import",
        ["--family", "proxyless"],
        "official OFA-ProxylessNAS checkpoints (w1.3 and w0.5 fixtures, every fixture subnet) imported: max abs "
        "logit difference of supernet and extracted timm subnets vs the official network (target ≤ 1e-5), and of "
        "their ONNX exports (target ≤ 1e-4)",
    ),
    "official_import_resnet": official_bench(
        "official_import",
        ["--family", "resnet"],
        "the official OFA-ResNet50 fixture (widths 0.1/0.15/0.2, 8 subnets) imported: max abs logit difference "
        "of supernet and extracted timm ByobNet subnets vs the official network (target ≤ 1e-5), and of their "
        "ONNX exports (target ≤ 1e-4)",
    ),
    "ps_vs_scratch": ps_bench(
        "digits",
        [],
        [],
        "digits, a sanity row and not a claim (360 test images, about 140 validation images carved from the "
        "training images): 8 subnets, progressive shrinking vs the same subnet trained from scratch, decided on "
        "validation as for Fashion-MNIST",
    ),
    "ps_vs_scratch_fashion": ps_bench(
        "fashion",
        ["--scratch-epochs", "20", "--doublings", "3"],
        FASHION_QUICK,
        "Fashion-MNIST (recipes/fashion_mnist.yaml): validation and test top-1 of 8 subnets (smallest, middle, "
        "largest, 5 random), progressive shrinking vs the same subnet trained from scratch, every choice on the "
        "5,000-image validation split by the rules of bench/ps_rules.py: lr grid at E = 20 epochs extended at an "
        "edge, convergence ladder (a doubling gains only if the 2-seed mean validation gain exceeds max(0.3, 2 SE); "
        "the next doubling shown as a sensitivity row), each PS subnet against its best twin on validation; 2 "
        "seeds a side; target: PS within 0.5 points (test) or better at <= 4x the largest twin's CPU seconds at its "
        "converged epoch count",
    ),
    "ps_vs_scratch_fashion_augmented": ps_bench(
        "fashion",
        [*CROP_FLIP, "--scratch-epochs", "20", "--doublings", "4", "--one-seed-after", "80", *AUGMENTED_TWINS],
        [*CROP_FLIP, *FASHION_QUICK],
        "Fashion-MNIST with random crops and flips (data.augment=crop_flip), the capped study: the smallest, middle "
        "and largest subnet's twins on the convergence ladder from 20 to 320 epochs (one seed past 80), the "
        "recipe's PS schedule unchanged (2 seeds), every choice on validation by the rules of ps_vs_scratch_fashion; "
        "the same target (PS within 0.5 points on test, at <= 4x the largest twin's CPU seconds at its converged "
        "epoch count)",
    ),
    "search_quality": Benchmark(
        ["-m", "bench.search_quality", *PINNED_FASHION_SUPERNET, "--json"],
        "Fashion-MNIST (the supernet of recipes/fashion_mnist.yaml with its former 1+40-epoch elastic phase, "
        "pinned by --set; the recipe now ships 1+20): does the search pick the right subnet? Per latency "
        "budget (the pipeline's four) and search seed (3), the found subnet's true top-1 against the best of 1,000 "
        "measured random subnets that fit (chosen on one validation quarter, scored on another; the predictor's "
        "data on the other half), regret, rank, measured latency, a true-accuracy re-rank of the final population, "
        "the front share; and the predictor's learning curve at 100-3,000 subnets (target: regret <= max(0.3 "
        "points, 1 SE) within budget + 10% measured latency, or its cause)",
        [
            *("-m", "bench.search_quality", "--recipe", "digits", "--samples", "40", "--sizes", "20", "40"),
            *(f"--set=phases.{p}.epochs=1" for p in ("full", "kernel", "depth_1", "depth_2", "expand_1", "expand_2")),
            *(f"--set=phases.{p}.warmup_epochs=0" for p in ("kernel", "depth_2", "expand_2")),
            *("--rerank", "4", "--front-points", "10", "--population", "20", "--generations", "20"),
            *("--lut", "latency_tables/digits_ort-cpu_t1_b1.yaml", "--cache", "runs/bench/search_quality_quick"),
            *("--runs", "runs/bench/search_quality_quick/ps_runs"),
            *("--png", "runs/bench/search_quality_quick.png", "--json"),
        ],
        {
            "all_within": "every found subnet within the bar",
            "regret_max": "worst regret",
            "causes": "causes",
            "truth_retest_tau": "the measurement's test-retest tau (< 0.3: regrets are within noise, see its caveat)",
        },
        on_request=True,
    ),
    "int8_search": Benchmark(
        ["-m", "bench.int8_search", *PINNED_FASHION_SUPERNET, "--json"],
        "Fashion-MNIST (the supernet of recipes/fashion_mnist.yaml with its former 1+40-epoch elastic phase, "
        "pinned by --set; the recipe now ships 1+20): the subnet a float32 search picks (float32 ONNX "
        "Runtime table and predictor), then quantized, against the INT8 search's pick (INT8 table and predictor), "
        "for 3 budgets (25/50/75% of the INT8 table's range): both exported as `ofa export --int8` ships them, "
        "INT8 top-1 on the same test images (paired difference ± SE), INT8 latency timed whole; the INT8 table's "
        "`lut check` (target: >= 90% within ±10%, Spearman >= 0.95) and the predictors' held-out fits (300 subnets)",
        [
            *("-m", "bench.int8_search", "--recipe", "digits", "--subnets", "10", "--check", "3"),
            *(f"--set=phases.{p}.epochs=1" for p in ("full", "kernel", "depth_1", "depth_2", "expand_1", "expand_2")),
            *(f"--set=phases.{p}.warmup_epochs=0" for p in ("kernel", "depth_2", "expand_2")),
            *(
                "--cache",
                "runs/bench/int8_search_quick",
                "--tables",
                "runs/bench/int8_search_quick",
                "--runs",
                "runs/bench/int8_search_quick/ps_runs",
                "--json",
            ),
        ],
        on_request=True,
    ),
    "critical_batch": critical_batch_bench(
        "recipes/digits.yaml",
        ["--lr-factors", "0.25", "0.5", "1", "2", "4"],
        "critical batch size measured by training the full network to a fixed validation loss at batch sizes "
        "16-512 (best of 5 learning rates each, 0.25x to 4x the sqrt-scaled recipe rate; fit S = S_min + E_min/B, "
        "B_crit = E_min/S_min, 68% interval) vs the gradient noise scale B_simple at the reference run's weights at "
        "the target (goal: ratio in [0.5, 2]; the ratio's 68% interval adds B_simple's own standard error over its "
        "measurement steps to the fit's)",
    ),
    "critical_batch_fashion": critical_batch_bench(
        "recipes/fashion_mnist.yaml",
        [
            *("--batches", *map(str, (16, 32, 64, 128, 256, 512, 1024, 2048))),
            *("--lr-factors", *map(str, (0.125, 0.25, 0.5, 1))),
            *("--max-epochs", "16", "--out", "bench/data/critical_batch_fashion_mnist.png"),
        ],
        "the same on recipes/fashion_mnist.yaml at batch sizes 16-2048 with 4 rates each (0.125x to 1x: the best "
        "rate sat at the lowest of 0.5x-2x everywhere; target: validation loss 0.45; runs that miss it in 16 epochs "
        "count as not reached)",
    ),
}


def machine() -> str:
    return f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def run_one(name: str, quick: bool) -> dict:
    bench = BENCHMARKS[name]
    argv = [sys.executable, *(bench.quick if quick else bench.command)]
    print(f"== {name}: {' '.join(argv[1:])}", flush=True)
    start = time.perf_counter()
    # Tools installed beside this interpreter (benchmark_app in the venv) are found without activating it.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PATH": path})
    seconds = time.perf_counter() - start
    result = last_json(proc.stdout) if proc.returncode == 0 else {}
    if proc.returncode != 0 or not result:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"   failed (exit {proc.returncode}): {tail[0]}", flush=True)
    else:
        print(f"   {json.dumps(result)}", flush=True)
    return {
        "name": name,
        "command": command_text(bench.command),
        "meaning": bench.meaning,
        "exit": proc.returncode,
        "seconds": round(seconds, 1),
        "date": str(datetime.date.today()),
        "machine": machine(),
        "result": result,
    }


def command_text(command: list[str]) -> str:
    return "python " + " ".join(command)


def _cell(value: object) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _ps_table(result: dict) -> list[str]:
    """PS vs twins per subnet (validation and test), each twin's ladder, then the cost line."""
    lines = [
        "| subnet | MMACs | PS val | PS test | twin lr | twin converged at | best twin (epochs) | twin val | "
        "twin test | PS − twin, val | PS − twin, test |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ladders = ["", "| subnet | ladder on validation: doubling, mean gain (bar = max(0.3, 2 SE)) |", "|---|---|"]
    for name, r in result["subnets"].items():
        t = r["twin"]
        lr = f"{t['lr']:g}" + (" (at a grid edge)" if t["lr_at_edge"] else "")
        lines.append(
            f"| {name} | {r['macs'] / 1e6:.2f} | {r['ps_val']:.2f} | {r['ps_test']:.2f} | {lr} | "
            f"{t['converged_epochs'] or 'not converged'} | {t['best_epochs']} | {t['bar_val']:.2f} | "
            f"{t['bar_test']:.2f} | {r['delta_val']:+.2f} | {r['delta_test']:+.2f} |"
        )
        ladders.append(f"| {name} | {ladder_text(t)} |")
    lines += [
        *ladders,
        "",
        f"{result['train_images']} training / {result['val_images']} validation / {result['test_images']} test "
        f"images, seeds {result['seeds']}. {_cost_text(result)} Within 0.5 points of the best twin everywhere "
        f"(test): {'yes' if result['within_target'] else 'no'}; twins converged: "
        f"{'yes' if result['scratch_converged'] else 'no'}.",
    ]
    return lines


def _cost_text(result: dict) -> str:
    """The cost sentence: the ratio measured on one machine (`bench.ps_cost`), then the runs' records."""
    basis = result["budget_basis"]
    recorded = (
        f"PS run {result['ps_cpu_seconds']:.0f} CPU s ({result['ps_seconds']:.0f} wall s, "
        f"{result['ps_train_images']:,} subnet-images); largest twin at its converged epoch count ({basis['epochs']}) "
        f"{basis['cpu_seconds']:.0f} CPU s ({basis['seconds']:.0f} wall s)"
    )
    cost = result.get("cost")
    if cost is None:  # an entry from before the cost was measured on one machine
        return f"{recorded}; PS / largest twin {_cell(result['cpu_ratio'])} in CPU s (budget 4)."
    return (
        f"Cost, both sides' training steps timed on this machine in one process ({cost['slice_steps']}-step slices "
        f"of every phase and of the twin, {len(cost['twin']['rounds'])} rounds): PS {cost['ps_cpu_seconds']:.0f} CPU "
        f"s, largest twin at {basis['epochs']} epochs {cost['twin_cpu_seconds']:.0f} CPU s, PS / largest twin "
        f"{_cell(result['cpu_ratio'])} (budget 4: {'within' if result['within_budget'] else 'over'}). As the runs "
        f"recorded it, on the machines and hours that trained them: {recorded}, a ratio of "
        f"{result['recorded_cpu_ratio']:.2f}."
    )


def _ps_table_before_31(result: dict) -> list[str]:
    """A stale entry of the report before issue 31 (test only, chosen on test), kept until a rerun replaces it."""
    lines = [
        "| subnet | MMACs | PS top-1 | scratch top-1 | PS − scratch | scratch lr | scratch, longer (epochs) | "
        "PS − best scratch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in result["subnets"].items():
        s = r["scratch"]
        longer = ", ".join(f"{v:.2f} ({k})" for k, v in s.get("longer", {}).items()) or "not run"
        lines.append(
            f"| {name} | {r['macs'] / 1e6:.2f} | {r['ps_top1']:.2f} | {s['test_top1']:.2f} | "
            f"{r['delta']:+.2f} | {s['lr']:g} | {longer} | {r['delta_bar']:+.2f} |"
        )
    largest, basis = result["subnets"]["largest"]["scratch"], result["budget_basis"]
    lines += [
        "",
        f"{result['train_images']} training / {result['test_images']} test images, seeds {result['seeds']}. "
        f"PS run {result['ps_seconds']:.0f} s ({result['ps_train_images']:,} subnet-images); largest subnet "
        f"from scratch at its converged epoch count ({basis['epochs']}) {basis['seconds']:.0f} s "
        f"({largest['train_images'] // largest['epochs'] * basis['epochs']:,} images); PS / scratch-largest "
        f"{result['ps_seconds'] / basis['seconds']:.2f} (budget 4; in CPU time {_cell(result['cpu_ratio'])}). "
        "Within 0.5 points of the best twin "
        f"everywhere: {'yes' if result['within_target'] else 'no'}; scratch converged: "
        f"{'yes' if result['scratch_converged'] else 'no'}.",
    ]
    return lines


def render(runs: list[dict]) -> str:
    lines = [
        "# Benchmark results",
        "",
        "Written by `python -m bench.run_all`; each section gives the command, date and machine of its figures.",
        "Each figure is a ratio or a median measured within one run; rerun a line's command to reproduce it.",
        "",
    ]
    for run in runs:
        lines += [
            f"## {run['name']}",
            "",
            BENCHMARKS[run["name"]].meaning + ".",  # the text follows the code; the command is the same
            "",
            f"`{run['command']}` "
            f"(exit {run['exit']}, {run['seconds']} s, {run.get('date', '')}, {run.get('machine', '')})",
            "",
        ]
        if run.get("stale"):
            lines += [stale_note(run), ""]
        if run["result"].get("skipped"):
            lines.append(f"(skipped: {run['result']['skipped']})")
        elif "rules" in run["result"]:  # the PS-vs-scratch report
            lines += _ps_table(run["result"])
        elif "learning_curve" in run["result"]:  # the search-quality report
            lines += search_quality_markdown(run["result"])
        elif "int8_table_check" in run["result"]:
            lines += int8_search_render(run["result"]).splitlines()
        elif "ps_seconds" in run["result"]:  # its form before issue 31
            lines += _ps_table_before_31(run["result"])
        elif run["result"]:
            lines += ["| figure | value |", "|---|---|"]
            lines += [f"| {k} | {_cell(v)} |" for k, v in run["result"].items()]
        else:
            lines.append("(no result: the command failed)")
        lines.append("")
    return "\n".join(lines)


def readme_table(runs: list[dict]) -> str:
    """README's results table: the chosen figures of each entry, verbatim, with command, date and machine."""
    lines = ["| benchmark | figures | command | measured |", "|---|---|---|---|"]
    for run in runs:
        shown = BENCHMARKS[run["name"]].readme
        figures = "; ".join(
            f"{label} {_cell(run['result'][key])}" for key, label in shown.items() if key in run["result"]
        )
        if run["exit"] != 0 or not run["result"]:
            figures = f"failed (exit {run['exit']})"
        figures = figures or "see bench/RESULTS.md"
        if run.get("failed_rerun"):
            figures = f"stale ({run.get('date', '?')}; rerun {run['failed_rerun']['date']} failed): {figures}"
        elif run.get("stale"):
            figures = f"stale ({run.get('date', '?')}, older command): {figures}"
        lines.append(
            f"| {run['name']} | {figures} | `{run['command']}` | {run.get('date', '')}, {run.get('machine', '')} |"
        )
    return "\n".join(lines)


def update_readme(path: Path, table: str) -> str:
    text = path.read_text()
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{path}: no {README_BEGIN} ... {README_END} markers around the results table")
    return text[: begin + len(README_BEGIN)] + "\n" + table + "\n" + text[end:]


def current(entries: list[dict]) -> dict[str, dict]:
    """Every stored entry of a known benchmark; one whose command is no longer the benchmark's is kept and
    marked stale (with its date and old command) until the new command is run: no row is dropped silently."""
    kept = {}
    for r in entries:
        if r["name"] not in BENCHMARKS:
            continue
        now = command_text(BENCHMARKS[r["name"]].command)
        kept[r["name"]] = {**r, "stale": r["command"] != now or "failed_rerun" in r}
    return kept


def merge(kept: dict[str, dict], runs: list[dict]) -> dict[str, dict]:
    """The stored entries with these runs over them; a run that failed keeps the last figures it would have
    replaced, marked stale with the failure (its date and exit), so no row's figures are lost to it."""
    merged = dict(kept)
    for run in runs:
        old = kept.get(run["name"])
        failed = run["exit"] != 0 or not run["result"]
        good_before = old is not None and old["exit"] == 0 and bool(old["result"])
        if failed and good_before:
            merged[run["name"]] = {**old, "stale": True, "failed_rerun": {"date": run.get("date"), "exit": run["exit"]}}
        else:
            merged[run["name"]] = run
    return merged


def stale_note(run: dict) -> str:
    """The line a stale entry carries in RESULTS.md and README."""
    failed = run.get("failed_rerun")
    if failed:
        return (
            f"**stale**: measured {run.get('date', '?')}; its rerun on {failed['date']} failed (exit "
            f"{failed['exit']}), so these are the last figures it gave (rerun: `python -m bench.run_all --only "
            f"{run['name']}`)"
        )
    now = command_text(BENCHMARKS[run["name"]].command)
    return (
        f"**stale**: measured {run.get('date', '?')} with `{run['command']}`; the benchmark's command is now "
        f"`{now}` (rerun: `python -m bench.run_all --only {run['name']}`)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these benchmarks")
    parser.add_argument("--quick", action="store_true", help="smaller settings (a smoke run, writes nothing)")
    parser.add_argument("--render", action="store_true", help="only re-render from results.json")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "RESULTS.md")
    args = parser.parse_args()
    store = DATA / "results.json"
    names = [] if args.render else args.only or [n for n, b in BENCHMARKS.items() if not b.on_request]
    runs = [run_one(name, args.quick) for name in names]
    if args.quick:
        return 0 if all(r["exit"] == 0 for r in runs) else 1
    # Read the store only now, so a run_all that finished meanwhile (another --only) is kept.
    kept = current(json.loads(store.read_text())) if store.is_file() else {}
    merged = merge(kept, runs)
    ordered = [merged[name] for name in BENCHMARKS if name in merged]
    write_json(store, ordered)
    write_text(args.out, render(ordered))
    write_text(ROOT / "README.md", update_readme(ROOT / "README.md", readme_table(ordered)))
    print(f"wrote {args.out}, {store} and README.md's results table")
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
