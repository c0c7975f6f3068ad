"""Schedule ablations for progressive shrinking: one recorded run per change, and the docs table from them.

Each run trains a supernet with the recipe plus the run's overrides (``--set``) and compares the
smallest, middle and largest subnets with their from-scratch twins (`bench.ps_vs_scratch`:
same caches, so a twin trains once for every ablation that shares its data and optimizer). The
result is recorded under its name in ``bench/data/ps_ablation.json``; ``--render`` rewrites the table
in ``docs/progressive_shrinking.md`` between its markers from those records, never from typed figures.

    python -m bench.ps_ablation --name NAME --change "what differs" [--recipe fashion] [--set K=V ...]
        [--proxy K=V ...] [--seeds 0] [--scratch-epochs N] [--scratch-lr LR]
    python -m bench.ps_ablation --render
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path
from typing import Any

from bench import ps_vs_scratch as ps
from bench.common import DATA, ROOT
from ofa.utils.errors import OFAError
from ofa.utils.io import read_json, write_json, write_text

RECORDS = DATA / "ps_ablation.json"
DOC = ROOT / "docs" / "progressive_shrinking.md"
BEGIN, END = "<!-- ablation table: python -m bench.ps_ablation --render -->", "<!-- end of ablation table -->"
SHOWN = ("smallest", "middle", "largest")


def load_records() -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in read_json(RECORDS, "ablation records")} if RECORDS.is_file() else {}


def record(name: str, change: str, cfg: ps.BenchConfig, proxy: tuple[str, ...]) -> dict[str, Any]:
    """Run one ablation (PS and the scratch twins of smallest/middle/largest) and store its record."""
    report = ps.run(cfg)
    largest = report["subnets"]["largest"]["scratch"]  # the E-epoch twin: every record divides by it
    largest_scratch = largest["seconds"]
    row = {
        "name": name,
        "change": change,
        "date": str(datetime.date.today()),
        "recipe": report["recipe"],
        "proxy": list(proxy),
        "overrides": [o for o in cfg.overrides if o not in proxy],
        "lr_grid": sorted(float(lr) for lr in report["subnets"]["largest"]["scratch"]["grid"]),
        "recipe_digest": report["recipe_digest"],
        "seeds": report["seeds"],
        "train_images": report["train_images"],
        "test_images": report["test_images"],
        "ps_seconds": report["ps_seconds"],
        "ps_train_images": report["ps_train_images"],
        "scratch_largest_seconds": largest_scratch,
        "cost_ratio": report["ps_seconds"] / largest_scratch,
        "cpu_ratio": report["ps_cpu_seconds"] / largest["cpu_seconds"],
        "subnets": {
            n: {
                "ps": r["ps_top1"],
                "scratch": r["scratch"]["test_top1"],
                "delta": r["delta"],
                "scratch_lr": r["scratch"]["lr"],
                "scratch_epochs": r["scratch"]["epochs"],
                "scratch_2x": r["scratch"].get("test_top1_2x"),
            }
            for n, r in report["subnets"].items()
        },
    }
    records = load_records()
    records[name] = row
    write_json(RECORDS, list(records.values()))
    return row


def render(records: dict[str, dict[str, Any]]) -> str:
    """The markdown table: change -> PS top-1 and PS - scratch of each subnet, and the cost ratio."""
    head = (
        "| run | change | train/test images, scratch epochs, seeds | "
        + " | ".join(f"{n} PS (Δ)" for n in SHOWN)
        + " | PS s | PS / scratch-largest: wall (CPU) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in records.values():
        cells = [f"{r['subnets'][n]['ps']:.2f} ({r['subnets'][n]['delta']:+.2f})" for n in SHOWN]
        epochs = r["subnets"]["largest"]["scratch_epochs"]
        lines.append(
            f"| {r['name']} | {r['change']} | {r['train_images']}/{r['test_images']}, {epochs}, "
            f"{len(r['seeds'])} | "
            + " | ".join(cells)
            + f" | {r['ps_seconds']:.0f} | {r['cost_ratio']:.2f} ({r['cpu_ratio']:.2f}) |"
        )
    scratch: dict[tuple, dict[str, Any]] = {}
    for r in records.values():
        data = tuple(o for o in r["overrides"] if o.startswith("data."))  # twins differ with their data
        key = (r["train_images"], r["test_images"], r["subnets"]["largest"]["scratch_epochs"], data)
        if key not in scratch or r["subnets"]["largest"]["scratch_2x"] is not None:  # prefer checked twins
            scratch[key] = {"grid": r.get("lr_grid"), **{n: r["subnets"][n] for n in SHOWN}}
    lines += [
        "",
        "From-scratch twins: test top-1 at E epochs / at 2E where measured (the convergence check), "
        "at the lr chosen on validation from the lr grid:",
        "",
        "| train/test images | E | lr grid | " + " | ".join(SHOWN) + " |",
        "|---|---|---|---|---|---|",
    ]
    for (tr, te, epochs, data), subs in scratch.items():
        values = subs.pop("grid")
        grid = ", ".join(f"{g:g}" for g in values) if values else "not recorded"
        cells = [
            f"{s['scratch']:.2f} / {s['scratch_2x']:.2f} (lr {s['scratch_lr']:g})"
            if s["scratch_2x"] is not None
            else f"{s['scratch']:.2f} (lr {s['scratch_lr']:g})"
            for s in subs.values()
        ]
        images = f"{tr}/{te}" + (f" ({', '.join(data)})" if data else "")
        lines.append(f"| {images} | {epochs} | {grid} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_doc(records: dict[str, dict[str, Any]]) -> None:
    text = DOC.read_text() if DOC.is_file() else f"# Progressive shrinking\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        raise OFAError(f"{DOC}: the table markers {BEGIN!r} and {END!r} are missing")
    head, rest = text.split(BEGIN, 1)
    write_text(DOC, f"{head}{BEGIN}\n{render(records)}\n{END}{rest.split(END, 1)[1]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", help="the run's name (a rerun replaces its record)")
    p.add_argument("--change", default="", help="what the run changes, for the table")
    p.add_argument("--recipe", default="fashion")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="the change itself")
    p.add_argument("--proxy", action="append", default=[], metavar="KEY=VALUE", help="smaller data or epochs")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--scratch-epochs", type=int)
    p.add_argument("--scratch-lr", type=float)
    p.add_argument("--lr-factors", type=float, nargs="+", default=[0.5, 1.0, 2.0], help="the scratch lr grid")
    p.add_argument("--no-convergence", action="store_true")
    p.add_argument("--cache", type=Path, default=ps.DEFAULT_CACHE)
    p.add_argument("--render", action="store_true", help="only rewrite the docs table from the records")
    a = p.parse_args(argv)
    try:
        if not a.render:
            if not a.name:
                p.error("--name is required to record a run")
            cfg = ps.BenchConfig(
                recipe=a.recipe,
                overrides=(*a.proxy, *a.set),
                seeds=tuple(a.seeds),
                scratch_epochs=a.scratch_epochs,
                scratch_lr=a.scratch_lr,
                random_subnets=0,
                lr_factors=tuple(a.lr_factors),
                doublings=0 if a.no_convergence else 1,
                cache=a.cache,
            )
            row = record(a.name, a.change, cfg, tuple(a.proxy))
            print(
                " ".join(f"{n} {row['subnets'][n]['ps']:.2f} ({row['subnets'][n]['delta']:+.2f})" for n in SHOWN)
                + f"; PS {row['ps_seconds']:.0f} s = {row['cost_ratio']:.2f}x scratch largest"
                f" ({row['cpu_ratio']:.2f}x in CPU seconds)"
            )
        write_doc(load_records())
    except OFAError as exc:
        print(f"ps_ablation: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
