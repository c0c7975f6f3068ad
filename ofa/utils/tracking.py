"""Training figures where vision engineers watch them: TensorBoard, and W&B / MLflow when installed.

Every sink is optional: one that is requested but not installed is named in one line and skipped,
and ``metrics.jsonl`` plus the PNG plots stay the record of a run. A `Tracker` turns the rows the
trainer writes to ``metrics.jsonl`` into scalars (loss, lr, noise scale, each phase's corner
subnets' accuracy) and the final test table, and a fine-tuning run's into its loss, lr and top-1,
so the two never disagree. ``log_figures`` does the same for the series of other commands
(search, latency-table checks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class LoggingConfig:
    """Where training figures go besides metrics.jsonl and the PNG plots (each only when installed)."""

    tensorboard: bool = True  # event files in RUN/tensorboard (torch.utils.tensorboard)
    wandb: bool = False  # Weights & Biases run in project `project`
    mlflow: bool = False  # MLflow run in experiment `project` (MLFLOW_TRACKING_URI, default ./mlruns)
    project: str = "ofa"


Note = Callable[[str], None]
INSTALL = {"tensorboard": "ofa-toolkit[tensorboard]", "wandb": "wandb", "mlflow": "mlflow"}


class Sink(Protocol):
    """One destination of figures."""

    def scalars(self, values: Mapping[str, float], step: int) -> None: ...

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    """Event files under ``folder`` (``purge_step``: a resumed run drops what followed its checkpoint)."""

    def __init__(self, folder: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(folder), purge_step=purge_step)

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
        lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
        self.writer.add_text(name, "\n".join(lines), step)

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """A Weights & Biases run (offline or online, as wandb is configured)."""

    def __init__(self, project: str, name: str, folder: Path, config: Mapping[str, Any]) -> None:
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, name=name, dir=str(folder), config=dict(config))

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        self.run.log(dict(values), step=step)

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        self.run.log({name: self.wandb.Table(columns=list(columns), data=[list(r) for r in rows])}, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    """An MLflow run in experiment ``project`` (tracking URI from MLFLOW_TRACKING_URI)."""

    def __init__(self, project: str, name: str, config: Mapping[str, Any]) -> None:
        import mlflow

        self.mlflow = mlflow
        mlflow.set_experiment(project)
        mlflow.start_run(run_name=name)
        mlflow.log_dict(dict(config), "recipe.json")

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        self.mlflow.log_metrics(dict(values), step=step)

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        self.mlflow.log_table({c: [str(r[i]) for r in rows] for i, c in enumerate(columns)}, f"{name}.json")

    def close(self) -> None:
        self.mlflow.end_run()


class Tracker:
    """Fans figures out to the sinks; `row` reads a ``metrics.jsonl`` row."""

    def __init__(self, sinks: Sequence[Sink] = ()) -> None:
        self.sinks = list(sinks)

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        values = {k: float(v) for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        for sink in self.sinks:
            sink.scalars(values, step)

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        for sink in self.sinks:
            sink.table(name, columns, rows, step)

    def row(self, row: Mapping[str, Any]) -> None:
        """The scalars of one metrics row: an epoch's loss/lr/noise scale, an evaluation's subnets, the test."""
        kind, step = row.get("kind"), int(row.get("step", 0))
        if kind == "epoch":
            noise = row.get("noise_scale") or {}
            self.scalars(
                {
                    "train/loss": row["loss"],
                    "train/lr": row["lr"],
                    "train/images_per_s": row.get("images_per_s"),  # None (dropped) in a fine-tuning row
                    "val_top1/subnet": row.get("val_top1"),  # a fine-tuned subnet's, after each epoch
                    **{f"noise_scale/{k}": v for k, v in noise.items()},
                },
                step,
            )
        elif kind == "eval":
            self.scalars(
                {f"{row['split']}_top1/{row['phase']}/{name}": v["top1"] for name, v in row["subnets"].items()}, step
            )
            self.scalars(
                {f"{row['split']}_loss/{row['phase']}/{name}": v["loss"] for name, v in row["subnets"].items()}, step
            )
        elif kind == "test" and "test_top1" in row:  # a fine-tuned subnet
            self.scalars({"test_top1/subnet": row["test_top1"]}, step)
        elif kind == "test":
            subnets = row["subnets"]
            self.scalars({f"test_top1/{name}": v["top1"] for name, v in subnets.items()}, step)
            self.table(
                "test",
                ["subnet", "top-1 (%)", "loss"],
                [[name, f"{v['top1']:.2f}", f"{v['loss']:.4f}"] for name, v in subnets.items()],
                step,
            )

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        self.sinks = []


def open_tracker(cfg: LoggingConfig, out: Path, config: Mapping[str, Any], step: int, note: Note) -> Tracker:
    """The sinks ``cfg`` asks for that are installed (each missing one is one ``note``); a resumed run
    (``step`` > 0) drops TensorBoard events after ``step``."""
    sinks: list[Sink] = []
    wanted: list[tuple[str, Callable[[], Sink]]] = [
        ("tensorboard", lambda: TensorBoardSink(out / "tensorboard", purge_step=step or None)),
        ("wandb", lambda: WandbSink(cfg.project, out.name, out, config)),
        ("mlflow", lambda: MlflowSink(cfg.project, out.name, config)),
    ]
    for name, make in wanted:
        if getattr(cfg, name):
            sink = _try(name, make, note)
            if sink is not None:
                sinks.append(sink)
    return Tracker(sinks)


def _try(name: str, make: Callable[[], Sink], note: Note) -> Sink | None:
    try:
        return make()
    except ImportError:
        note(
            f"note: {name} is not installed (pip install '{INSTALL[name]}'): figures are written as JSON lines "
            f"and PNG only{'' if name == 'tensorboard' else f', not to {name}'}"
        )
        return None


def log_figures(
    folder: Path, series: Mapping[str, Sequence[float]], tables: Mapping[str, Sequence[Sequence[Any]]], note: Note
) -> Path | None:
    """TensorBoard curves (step = position in each series) and tables (first row: the columns) into
    ``folder``; None when TensorBoard is not installed (one ``note``)."""
    sink = _try("tensorboard", lambda: TensorBoardSink(folder), note)
    if sink is None:
        return None
    tracker = Tracker([sink])
    for tag, values in series.items():
        for i, value in enumerate(values):
            tracker.scalars({tag: value}, i)
    for name, (columns, *rows) in tables.items():
        tracker.table(name, columns, rows, 0)
    tracker.close()
    return folder
