"""``ofa lut build`` measures a device's latency table; ``ofa lut check`` judges one on whole subnets;
``ofa lut pack`` and ``ofa lut import`` make tables for devices without Python."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from ofa.commands._flags import add_flags, flag_values
from ofa.families.registry import arch_from_dict
from ofa.lut.build import TableBuildConfig, build_table_file, noise_text
from ofa.lut.check import CheckConfig, check_table_file
from ofa.lut.external_runner import CommandRunner
from ofa.lut.pack import ImportConfig, PackConfig, import_timings_file, pack_models
from ofa.lut.protocols import PROTOCOLS, Protocol, with_overrides
from ofa.lut.runner import RunnerBuildConfig, RunnerCheckConfig, build_with_runner_file, check_with_runner_file
from ofa.lut.timing import Standalone
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_of
from search.latency import space_from_arg

SPACE_HELP = "mbv3, a recipe or space YAML, or a checkpoint"


@dataclass(frozen=True)
class BuildProtocol:
    """How ``ofa lut build`` times: a protocol by name, and what its options change in it (None: keep)."""

    protocol: Literal["standalone", "interleaved"] = field(
        default="standalone",
        metadata={
            "help": "standalone: each model on its own, warm, in shuffled blocks, as a user measures it; "
            "interleaved: the older interleaved rounds"
        },
    )
    clock: Literal["wall", "thread", "auto"] | None = field(
        default=None,
        metadata={"help": "wall (standalone default), thread: the thread's CPU time, auto (interleaved default)"},
    )
    repeats: int | None = field(
        default=None,
        metadata={"help": "least kept blocks per model (standalone, default 15) or rounds (interleaved, default 150)"},
    )
    calls: int | None = field(
        default=None,
        metadata={"help": "least timed calls per block (standalone, default 3) or per round (default 2)"},
    )
    warmup: int | None = field(
        default=None, metadata={"help": f"untimed calls before each block (default {Standalone.warmup})"}
    )
    # the standalone estimator's options, as ``ofa lut check`` has them
    target_pct: float | None = field(default=None, metadata=field_of(CheckConfig, "target_pct").metadata)
    budget_s: float | None = field(default=None, metadata=field_of(CheckConfig, "budget_s").metadata)
    block_ms: float | None = field(
        default=None,
        metadata={"help": f"standalone: least milliseconds of calls per block (default {Standalone.block_ms:g})"},
    )
    reference_every: int | None = field(
        default=None,
        metadata={
            "metavar": "N",
            "help": f"standalone: model blocks between two blocks of the reference model (default "
            f"{Standalone.reference_every}; 2 spends a third of the timing on it instead of half)",
        },
    )

    def build(self) -> Protocol:
        """The named protocol with the changes (the other fields, as `with_overrides` reads them)."""
        changes = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "protocol"}
        return with_overrides(PROTOCOLS[self.protocol](), changes)


def register(subparsers: Any) -> None:
    lut = subparsers.add_parser("lut", help="build or check a per-device latency lookup table")
    verbs = lut.add_subparsers(dest="lut_command", metavar="{build,check,pack,import}", parser_class=type(lut))
    lut.set_defaults(func=lambda args: (lut.print_help(), 2)[1])
    _add_build(verbs)
    _add_pack_and_import(verbs)
    _add_check(verbs)


def _add_build(verbs: Any) -> None:
    build = verbs.add_parser("build", help="measure every layer config of a space on this device")
    build.add_argument("--space", required=True, help=SPACE_HELP)
    add_flags(build, TableBuildConfig)
    add_flags(build, BuildProtocol)
    _add_runner_args(build)
    build.add_argument(
        "--pack",
        type=Path,
        metavar="DIR",
        help="with --runner: where the models are packed (default: OUT without suffix + .pack; reused when it exists)",
    )
    build.set_defaults(func=run_build)


def _add_check(verbs: Any) -> None:
    check = verbs.add_parser("check", help="compare a table's predictions with measured whole subnets")
    check.add_argument("table", type=Path)
    check.add_argument("--space", help="also require the table to cover this space (default: the table's own)")
    add_flags(check, CheckConfig)
    check.add_argument(
        "--out", type=Path, help="folder for check.jsonl, summary.json, check.png (default runs/lut-check/TABLE_NAME)"
    )
    check.add_argument("--json", action="store_true", help="print one JSON summary object as the last line")
    _add_runner_args(check)
    check.set_defaults(func=run_check)


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
    pack.add_argument("--space", required=True, help=SPACE_HELP)
    add_flags(pack, PackConfig, {"format": {"required": True}})
    pack.set_defaults(func=run_pack)

    imp = verbs.add_parser("import", help="a table from a pack's timings collected on a device (CSV)")
    imp.add_argument("pack", type=Path, help="folder written by `ofa lut pack`")
    imp.add_argument("--timings", required=True, type=Path, help="CSV: key,median_ms (optional samples, std_ms)")
    add_flags(imp, ImportConfig)
    imp.set_defaults(func=run_import)


def run_build(args: argparse.Namespace) -> int:
    if args.runner or args.runner_regex:
        return run_build_with_runner(args)
    protocol = BuildProtocol(**flag_values(BuildProtocol, args)).build()
    cfg = TableBuildConfig(**flag_values(TableBuildConfig, args), protocol=protocol, command=args.command_line)
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
    cfg = CheckConfig(**flag_values(CheckConfig, args))
    report = check_table_file(args.table, cfg, space=args.space, out=args.out)
    result = report.result
    print(f"{'res':>4} {'predicted':>10} {'measured':>10} {'error':>8}  arch")
    for row in result.rows:
        print(
            f"{row['resolution']:>4} {row['predicted_ms']:>8.3f}ms {row['measured_ms']:>8.3f}ms "
            f"{row['error_pct']:>+7.2f}%  {arch_from_dict(report.space, row['arch']).short()}"
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
    _check_runner_args(args)
    build = flag_values(TableBuildConfig, args)
    pack = PackConfig(
        out=args.pack or args.out.with_suffix(".pack"),
        format=args.backend,
        **{k: build[k] for k in ("resolutions", "batch", "dtype", "calibrate", "seed", "progress")},
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
    cfg = PackConfig(**flag_values(PackConfig, args))
    manifest = pack_models(space_from_arg(args.space), cfg)
    print(f"wrote {manifest} and the models in {args.out}; see {args.out / 'README.md'} to time them")
    return 0


def run_import(args: argparse.Namespace) -> int:
    table = import_timings_file(args.pack, args.timings, ImportConfig(**flag_values(ImportConfig, args)))
    print(f"wrote {args.out}: {table.describe()}")
    return 0


def run_check_with_runner(args: argparse.Namespace) -> int:
    _check_runner_args(args)
    check = flag_values(CheckConfig, args)
    out = args.out or Path("runs") / "lut-check" / args.table.stem
    cfg = RunnerCheckConfig(
        CommandRunner(args.runner, args.runner_regex),
        out / "models",
        blocks=args.repeats or 3,
        **{k: check[k] for k in ("n", "resolutions", "seed", "progress", "dtype")},
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


def _check_runner_args(args: argparse.Namespace) -> None:
    if not (args.runner and args.runner_regex):
        raise OFAError("--runner and --runner-regex go together: the command, and how to read the time it prints")
