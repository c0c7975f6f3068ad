"""``ofa lut build`` measures a device's latency table; ``ofa lut check`` judges one on whole subnets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    lut = subparsers.add_parser("lut", help="build or check a per-device latency lookup table")
    verbs = lut.add_subparsers(dest="lut_command", metavar="{build,check,pack,import}", parser_class=type(lut))
    lut.set_defaults(func=lambda args: (lut.print_help(), 2)[1])
    _add_build(verbs)
    _add_pack_and_import(verbs)
    _add_check(verbs)


def _add_build(verbs: Any) -> None:
    build = verbs.add_parser("build", help="measure every layer config of a space on this device")
    build.add_argument("--space", required=True, help="mbv3, a recipe or space YAML, or a checkpoint")
    build.add_argument("--out", required=True, type=Path, help="table to write (resumed if it exists)")
    build.add_argument(
        "--backend",
        default="ort-cpu",
        help="ort-cpu (default), torch-cpu, ort-cuda, torch-cuda, openvino-cpu, executorch-xnnpack",
    )
    build.add_argument("--resolutions", type=int, nargs="+", help="resolutions to measure (default: the space's)")
    build.add_argument("--threads", type=int, default=1)
    build.add_argument("--batch", type=int, default=1)
    build.add_argument(
        "--protocol",
        choices=("standalone", "interleaved"),
        default="standalone",
        help="standalone (default): each model on its own, warm, in shuffled blocks, as a user "
        "measures it; interleaved: the older interleaved rounds",
    )
    build.add_argument(
        "--clock",
        choices=("wall", "thread", "auto"),
        help="wall (standalone default), thread: the thread's CPU time, auto (interleaved default)",
    )
    build.add_argument(
        "--repeats",
        type=int,
        help="least kept blocks per model (standalone, default 15) or rounds (interleaved, default 150)",
    )
    build.add_argument(
        "--calls", type=int, help="least timed calls per block (standalone, default 3) or per round (default 2)"
    )
    build.add_argument("--warmup", type=int, help="untimed calls before each block (default 10)")
    _add_build_noise_args(build)
    build.add_argument(
        "--calibrate",
        type=int,
        default=10,
        help="whole subnets per resolution for the correction (0: none; default 10)",
    )
    build.add_argument("--device", help="device name stored in meta (default: host name)")
    build.add_argument("--seed", type=int, default=0)
    _add_runner_args(build)
    build.add_argument(
        "--pack",
        type=Path,
        metavar="DIR",
        help="with --runner: where the models are packed (default: OUT without suffix + .pack; reused when it exists)",
    )
    build.add_argument("--quiet", action="store_true", help="no progress bars")
    build.set_defaults(func=run_build)


def _add_check(verbs: Any) -> None:
    check = verbs.add_parser("check", help="compare a table's predictions with measured whole subnets")
    check.add_argument("table", type=Path)
    check.add_argument("--space", help="also require the table to cover this space (default: the table's own)")
    check.add_argument("--n", type=int, default=50, help="random subnets per resolution (default 50)")
    check.add_argument("--resolutions", type=int, nargs="+", help="resolutions to check (default: all of the table's)")
    check.add_argument("--repeats", type=int, help="blocks (standalone) or rounds per model (default: the protocol's)")
    check.add_argument(
        "--protocol",
        choices=("standalone", "table"),
        default="standalone",
        help="standalone (default): as a user measures; table: the table's own protocol",
    )
    _add_estimator_args(check)
    check.add_argument(
        "--max-noise",
        type=float,
        default=5.0,
        metavar="PCT",
        help="report a resolution as too noisy to judge when a test-retest of its subnets differs by more "
        "(median, %%; default 5)",
    )
    check.add_argument("--seed", type=int, default=0)
    check.add_argument(
        "--out", type=Path, help="folder for check.jsonl, summary.json, check.png (default runs/lut-check/TABLE_NAME)"
    )
    check.add_argument("--json", action="store_true", help="print one JSON summary object as the last line")
    _add_runner_args(check)
    check.add_argument("--quiet", action="store_true", help="no progress bars")
    check.set_defaults(func=run_check)


def _add_build_noise_args(build: Any) -> None:
    _add_estimator_args(build)
    build.add_argument(
        "--max-noise",
        type=float,
        metavar="PCT",
        help="strict (for tables built in CI): a resolution whose whole subnets' figures are less sure than "
        "±PCT (95%% interval) is timed again, and after 3 tries the build stops without writing it "
        "(default: warn above 5%%, write it and mark it noisy)",
    )
    build.add_argument(
        "--remeasure-noisy", action="store_true", help="resuming OUT: time the resolutions it marks noisy again"
    )


def _add_estimator_args(parser: Any) -> None:
    parser.add_argument(
        "--target",
        type=float,
        metavar="PCT",
        help="standalone: blocks are added until each figure's 95%% interval is within ±PCT (default 2)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        metavar="S",
        help="standalone: most seconds of timing per model once its least blocks are in (default 1)",
    )


def _add_runner_args(parser: Any) -> None:
    parser.add_argument(
        "--runner",
        metavar="'COMMAND {model} ...'",
        help="time each model by running this command (e.g. benchmark_app, adb shell ...) instead of "
        "in this process; {model}: the model file's path, {file}: its path in the pack",
    )
    parser.add_argument(
        "--runner-regex",
        metavar="REGEX",
        help="reads the time from the runner's output: groups value+unit, or ms, us, s or fps, else group 1 in ms",
    )


def _add_pack_and_import(verbs: Any) -> None:
    """``ofa lut pack`` and ``ofa lut import``: tables for devices without Python."""
    pack = verbs.add_parser("pack", help="write every model a table needs, to time them on a device without Python")
    pack.add_argument(
        "--backend",
        required=True,
        metavar="FORMAT",
        help="onnx, openvino or executorch (or a backend: ort-cpu, openvino-cpu, ...)",
    )
    pack.add_argument("--space", required=True, help="mbv3, a recipe or space YAML, or a checkpoint")
    pack.add_argument("--out", required=True, type=Path, help="new folder for the models, manifest.yaml, README.md")
    pack.add_argument("--resolutions", type=int, nargs="+", help="resolutions (default: the space's)")
    pack.add_argument("--batch", type=int, default=1)
    pack.add_argument("--calibrate", type=int, default=10, help="calibration subnets per resolution (default 10)")
    pack.add_argument("--seed", type=int, default=0)
    pack.add_argument("--quiet", action="store_true", help="no progress bars")
    pack.set_defaults(func=run_pack)

    imp = verbs.add_parser("import", help="a table from a pack's timings collected on a device (CSV)")
    imp.add_argument("pack", type=Path, help="folder written by `ofa lut pack`")
    imp.add_argument("--timings", required=True, type=Path, help="CSV: key,median_ms (optional samples, std_ms)")
    imp.add_argument("--out", required=True, type=Path, help="table to write")
    imp.add_argument("--device", default="unknown", help="device name stored in meta")
    imp.add_argument("--threads", type=int, default=1, help="threads the models ran with, stored in meta")
    imp.set_defaults(func=run_import)


def run_build(args: argparse.Namespace) -> int:
    if args.runner or args.runner_regex:
        return run_build_with_runner(args)
    from ofa.lut.build import TableBuildConfig, build_table_file, noise_text
    from ofa.lut.timing import PROTOCOLS, with_overrides

    protocol = with_overrides(
        PROTOCOLS[args.protocol](),
        repeats=args.repeats,
        warmup=args.warmup,
        calls=args.calls,
        clock=args.clock,
        target_pct=args.target,
        budget_s=args.time_budget,
    )
    cfg = TableBuildConfig(
        out=args.out,
        backend=args.backend,
        resolutions=tuple(args.resolutions) if args.resolutions else None,
        threads=args.threads,
        batch=args.batch,
        protocol=protocol,
        calibrate=args.calibrate,
        max_noise_pct=args.max_noise,
        remeasure_noisy=args.remeasure_noisy,
        seed=args.seed,
        device=args.device,
        command=args.command_line,
        progress=not args.quiet,
    )
    table = build_table_file(args.space, cfg)
    print(f"wrote {args.out}: {table.describe()}")
    noise = (table.meta.get("noise") or {}).get("per_resolution") or {}
    for r, fit in sorted((table.meta["correction"].get("per_resolution") or {}).items()):
        print(
            f"  {r} px: correction scale {fit['scale']:.4f} offset {fit['offset']:+.4f} ms "
            f"(fit MAPE {fit['fit_mape_pct']:.2f}% on {len(fit['points'])} calibration subnets)"
            + (f"; {noise_text(noise[r])}" if r in noise else "")
        )
    return 0


def run_check(args: argparse.Namespace) -> int:
    if args.runner or args.runner_regex:
        return run_check_with_runner(args)
    from ofa.families.mbv3.arch import Arch
    from ofa.lut.check import CheckConfig, check_table_file

    cfg = CheckConfig(
        n=args.n,
        resolutions=tuple(args.resolutions) if args.resolutions else None,
        seed=args.seed,
        repeats=args.repeats,
        protocol=args.protocol,
        target_pct=args.target,
        budget_s=args.time_budget,
        max_noise_pct=args.max_noise,
        progress=not args.quiet,
    )
    report = check_table_file(args.table, cfg, space=args.space, out=args.out)
    result = report.result
    print(f"{'res':>4} {'predicted':>10} {'measured':>10} {'error':>8}  arch")
    for row in result.rows:
        print(
            f"{row['resolution']:>4} {row['predicted_ms']:>8.3f}ms {row['measured_ms']:>8.3f}ms "
            f"{row['error_pct']:>+7.2f}%  {Arch.from_dict(row['arch']).short()}"
        )
    for name, s in [("all", result.summary), *result.summary["per_resolution"].items()]:
        adj = s["drift_adjusted"]
        drift = (
            f"  machine now x{s['machine_drift']:.3f} of build time, noise {s['noise_pct']:.2f}%"
            if "machine_drift" in s
            else ""
        )
        print(
            f"{name!s:>4}: n={s['n']} MAPE {s['mape']:.2f}%  within ±10% {s['within_10pct']:.1f}%  "
            f"Spearman {s['spearman']:.4f}  max error {s['max_abs_error_pct']:.1f}%{drift}  "
            f"(drift-adjusted: MAPE {adj['mape']:.2f}%, within ±10% {adj['within_10pct']:.1f}%)"
        )
    if result.summary["too_noisy"]:
        print(
            f"too noisy to measure at {result.summary['too_noisy']} px: a test-retest of its subnets differed by "
            f"more than {result.summary['max_noise_pct']:g}%; the errors there do not judge the table"
        )
    print(f"wrote {report.rows_path}, {report.summary_path}, {report.plot_path}")
    if args.json:
        print(json.dumps(report.summary))
    return 0


def run_build_with_runner(args: argparse.Namespace) -> int:
    from ofa.lut.external_runner import CommandRunner
    from ofa.lut.pack import PackConfig
    from ofa.lut.runner import RunnerBuildConfig, build_with_runner_file
    from ofa.utils.errors import OFAError

    if not (args.runner and args.runner_regex):
        raise OFAError("--runner and --runner-regex go together: the command, and how to read the time it prints")
    pack = PackConfig(
        out=args.pack or args.out.with_suffix(".pack"),
        format=args.backend,
        resolutions=tuple(args.resolutions) if args.resolutions else None,
        batch=args.batch,
        calibrate=args.calibrate,
        seed=args.seed,
        progress=not args.quiet,
    )
    cfg = RunnerBuildConfig(
        out=args.out,
        runner=CommandRunner(args.runner, args.runner_regex),
        pack=pack,
        blocks=args.repeats or 3,
        device=args.device or "unknown",
        threads=args.threads,
    )
    table = build_with_runner_file(args.space, cfg)
    print(f"wrote {args.out}: {table.describe()} (models and timings.csv in {pack.out})")
    return 0


def run_pack(args: argparse.Namespace) -> int:
    from ofa.lut.pack import PackConfig, pack_models
    from search.latency import space_from_arg

    cfg = PackConfig(
        out=args.out,
        format=args.backend,
        resolutions=tuple(args.resolutions) if args.resolutions else None,
        batch=args.batch,
        calibrate=args.calibrate,
        seed=args.seed,
        progress=not args.quiet,
    )
    manifest = pack_models(space_from_arg(args.space), cfg)
    print(f"wrote {manifest} and the models in {args.out}; see {args.out / 'README.md'} to time them")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from ofa.lut.pack import ImportConfig, import_timings_file

    table = import_timings_file(args.pack, args.timings, ImportConfig(args.out, args.device, args.threads))
    print(f"wrote {args.out}: {table.describe()}")
    return 0


def run_check_with_runner(args: argparse.Namespace) -> int:
    from ofa.lut.external_runner import CommandRunner
    from ofa.lut.runner import RunnerCheckConfig, check_with_runner_file
    from ofa.utils.errors import OFAError

    if not (args.runner and args.runner_regex):
        raise OFAError("--runner and --runner-regex go together: the command, and how to read the time it prints")
    out = args.out or Path("runs") / "lut-check" / args.table.stem
    cfg = RunnerCheckConfig(
        CommandRunner(args.runner, args.runner_regex),
        out / "models",
        n=args.n,
        resolutions=tuple(args.resolutions) if args.resolutions else None,
        blocks=args.repeats or 3,
        seed=args.seed,
        progress=not args.quiet,
    )
    result = check_with_runner_file(args.table, cfg, out)
    for name, s in [("all", result.summary), *result.summary["per_resolution"].items()]:
        print(
            f"{name!s:>4}: n={s['n']} MAPE {s['mape']:.2f}%  within ±10% {s['within_10pct']:.1f}%  "
            f"Spearman {s['spearman']:.4f}  max error {s['max_abs_error_pct']:.1f}%"
        )
    print(f"wrote {out / 'summary.json'}")
    if args.json:
        print(json.dumps(result.summary))
    return 0
