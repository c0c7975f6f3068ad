"""``ofa lut build`` measures a device's latency table; ``ofa lut check`` judges one on whole subnets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    lut = subparsers.add_parser("lut", help="build or check a per-device latency lookup table")
    verbs = lut.add_subparsers(dest="lut_command", metavar="{build,check}", parser_class=type(lut))
    lut.set_defaults(func=lambda args: (lut.print_help(), 2)[1])

    build = verbs.add_parser("build", help="measure every layer config of a space on this device")
    build.add_argument("--space", required=True, help="mbv3, a recipe or space YAML, or a checkpoint")
    build.add_argument("--out", required=True, type=Path, help="table to write (resumed if it exists)")
    build.add_argument("--backend", default="ort-cpu", help="ort-cpu (default), torch-cpu, ort-cuda, torch-cuda")
    build.add_argument("--resolutions", type=int, nargs="+", help="resolutions to measure (default: the space's)")
    build.add_argument("--threads", type=int, default=1)
    build.add_argument("--batch", type=int, default=1)
    build.add_argument("--protocol", choices=("standalone", "interleaved"), default="standalone",
                       help="standalone (default): each model on its own, warm, in shuffled blocks, as a user "
                            "measures it; interleaved: the older interleaved rounds")
    build.add_argument("--clock", choices=("wall", "thread", "auto"),
                       help="wall (standalone default), thread: the thread's CPU time, auto (interleaved default)")
    build.add_argument("--repeats", type=int, help="blocks per model (standalone, default 7) or rounds "
                                                   "(interleaved, default 150)")
    build.add_argument("--calls", type=int, help="timed calls per block (default 50) or per round (default 2)")
    build.add_argument("--warmup", type=int, help="untimed calls before each block (default 10)")
    build.add_argument("--max-noise", type=float, default=5.0, metavar="PCT",
                       help="a resolution whose whole subnets' block medians spread more (IQR, %% of median) is "
                            "timed again, and after 3 tries the build stops without writing it (default 5)")
    build.add_argument("--calibrate", type=int, default=10,
                       help="whole subnets per resolution for the correction (0: none; default 10)")
    build.add_argument("--device", help="device name stored in meta (default: host name)")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--quiet", action="store_true", help="no progress bars")
    build.set_defaults(func=run_build)

    check = verbs.add_parser("check", help="compare a table's predictions with measured whole subnets")
    check.add_argument("table", type=Path)
    check.add_argument("--space", help="also require the table to cover this space (default: the table's own)")
    check.add_argument("--n", type=int, default=50, help="random subnets per resolution (default 50)")
    check.add_argument("--resolutions", type=int, nargs="+", help="resolutions to check (default: all of the table's)")
    check.add_argument("--repeats", type=int, help="blocks (standalone) or rounds per model (default: the "
                                                   "protocol's)")
    check.add_argument("--protocol", choices=("standalone", "table"), default="standalone",
                       help="standalone (default): as a user measures; table: the table's own protocol")
    check.add_argument("--max-noise", type=float, default=5.0, metavar="PCT",
                       help="report a resolution as too noisy to judge above this spread (default 5)")
    check.add_argument("--seed", type=int, default=0)
    check.add_argument("--out", type=Path, help="folder for check.jsonl, summary.json, check.png "
                                                "(default runs/lut-check/TABLE_NAME)")
    check.add_argument("--json", action="store_true", help="print one JSON summary object as the last line")
    check.add_argument("--quiet", action="store_true", help="no progress bars")
    check.set_defaults(func=run_check)


def run_build(args: argparse.Namespace) -> int:
    from ofa.deploy.lut_build import TableBuildConfig, build_table_file
    from ofa.deploy.timing import PROTOCOLS, with_overrides

    protocol = with_overrides(PROTOCOLS[args.protocol](), repeats=args.repeats, warmup=args.warmup, calls=args.calls,
                              clock=args.clock)
    cfg = TableBuildConfig(out=args.out, backend=args.backend,
                           resolutions=tuple(args.resolutions) if args.resolutions else None, threads=args.threads,
                           batch=args.batch, protocol=protocol, calibrate=args.calibrate, max_noise_pct=args.max_noise,
                           seed=args.seed, device=args.device, command=args.command_line, progress=not args.quiet)
    table = build_table_file(args.space, cfg)
    print(f"wrote {args.out}: {table.describe()}")
    noise = (table.meta.get("noise") or {}).get("per_resolution") or {}
    for r, fit in sorted((table.meta["correction"].get("per_resolution") or {}).items()):
        print(f"  {r} px: correction scale {fit['scale']:.4f} offset {fit['offset']:+.4f} ms "
              f"(fit MAPE {fit['fit_mape_pct']:.2f}% on {len(fit['points'])} calibration subnets)"
              + (f"; noise {noise[r]['noise_pct']:.2f}% (allowed {noise[r]['max_pct']:g}%)" if r in noise else ""))
    return 0


def run_check(args: argparse.Namespace) -> int:
    from ofa.arch import Arch
    from ofa.deploy.lut_check import CheckConfig, check_table_file

    cfg = CheckConfig(n=args.n, resolutions=tuple(args.resolutions) if args.resolutions else None, seed=args.seed,
                      repeats=args.repeats, protocol=args.protocol, max_noise_pct=args.max_noise,
                      progress=not args.quiet)
    report = check_table_file(args.table, cfg, space=args.space, out=args.out)
    result = report.result
    print(f"{'res':>4} {'predicted':>10} {'measured':>10} {'error':>8}  arch")
    for row in result.rows:
        print(f"{row['resolution']:>4} {row['predicted_ms']:>8.3f}ms {row['measured_ms']:>8.3f}ms "
              f"{row['error_pct']:>+7.2f}%  {Arch.from_dict(row['arch']).short()}")
    for name, s in [("all", result.summary), *result.summary["per_resolution"].items()]:
        adj = s["drift_adjusted"]
        drift = (f"  machine now x{s['machine_drift']:.3f} of build time, noise {s['noise_pct']:.2f}%"
                 if "machine_drift" in s else "")
        print(f"{name!s:>4}: n={s['n']} MAPE {s['mape']:.2f}%  within ±10% {s['within_10pct']:.1f}%  "
              f"Spearman {s['spearman']:.4f}  max error {s['max_abs_error_pct']:.1f}%{drift}  "
              f"(drift-adjusted: MAPE {adj['mape']:.2f}%, within ±10% {adj['within_10pct']:.1f}%)")
    if result.summary["too_noisy"]:
        print(f"too noisy to measure at {result.summary['too_noisy']} px: probe block medians spread more than "
              f"{result.summary['max_noise_pct']:g}%; the errors there do not judge the table")
    print(f"wrote {report.rows_path}, {report.summary_path}, {report.plot_path}")
    if args.json:
        print(json.dumps(report.summary))
    return 0
