"""The ``pipeline:`` section of a recipe: what `ofa pipeline` does after training (not part of what is
trained), each key overridable by the pipeline's flag of the same name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ofa.utils.config import ConfigError
from ofa.utils.fields import field_label


@dataclass(frozen=True)
class PipelineSettings:
    """What `ofa pipeline` does after training (its flags, named here, override each key); not part of what is
    trained. Errors name the key and its flag: ``pipeline.subnets / --subnets``."""

    train_processes: int = field(
        default=1,
        metadata={
            "metavar": "N",
            "help": "train on N local processes (data-parallel, each with its share of the batch and of the "
            "threads); under torchrun the ranks are torchrun's",
        },
    )
    threads: int | None = field(
        default=None,
        metadata={
            "metavar": "N",
            "help": "torch threads of the pipeline's process, shared among its training processes (default: "
            "torch's, one per core); a small network loses little on one, and a pool of threads slows down "
            "many-fold while another program holds one of its cores",
        },
    )
    subnets: int = field(default=100, metadata={"metavar": "N", "help": "subnets measured for the accuracy predictor"})
    calib_batches: int = field(
        default=8, metadata={"metavar": "N", "help": "BN recalibration batches per measured subnet"}
    )
    targets_ms: tuple[float, ...] | None = field(
        default=None,
        metadata={
            "metavar": "MS",
            "help": "latency budgets (default: four spread between the smallest and largest subnet)",
        },
    )
    lut: str | None = field(
        default=None,
        metadata={"metavar": "TABLE", "help": "latency table to use instead of building one on this machine"},
    )
    max_noise_pct: float | None = field(
        default=None,
        metadata={
            "flag": "--max-noise",
            "metavar": "PCT",
            "help": "strict (for CI): stop when a table resolution is less sure than ±PCT (default: warn, write it "
            "and go on)",
        },
    )
    lut_budget_s: float = field(
        default=0.5,
        metadata={
            "flag": "--lut-budget",
            "metavar": "S",
            "help": "table build: most seconds of timing per model once its least blocks are in",
        },
    )
    lut_block_ms: float = field(
        default=20.0,
        metadata={
            "metavar": "MS",
            "help": "table build: least milliseconds of calls per timed block (the build times at least 15 "
            "blocks per model, so this sets its least time)",
        },
    )
    lut_blocks: int = field(
        default=15,
        metadata={
            "metavar": "N",
            "help": "table build: least timed blocks per model (each one paired with a block of the reference "
            "model); fewer blocks take less time and widen each figure's interval, which the table's noise records",
        },
    )
    lut_reference_every: int = field(
        default=1,
        metadata={
            "metavar": "N",
            "help": "table build: model blocks between two blocks of the reference model (2 spends a third of "
            "the timing on it instead of half)",
        },
    )
    int8: bool = field(default=False, metadata={"help": "also export INT8 models and report their accuracy"})
    dtype: Literal["float32", "int8"] = field(
        default="float32",
        metadata={
            "help": "int8: the whole chain in INT8 (an INT8 table, INT8 accuracy data and predictor, an INT8 "
            "search, INT8 exports checked against the table); float32 searches in float32"
        },
    )

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "int8"):
            raise ConfigError(f"{_setting('dtype')}: unknown dtype {self.dtype!r} (choose from float32, int8)")
        if self.train_processes < 1:
            raise ConfigError(f"{_setting('train_processes')} must be at least 1, got {self.train_processes}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"{_setting('threads')} must be at least 1, got {self.threads}")
        if self.subnets < 10:
            raise ConfigError(
                f"{_setting('subnets')} must be at least 10 (the predictor needs three splits), got {self.subnets}"
            )
        if self.calib_batches < 1:
            raise ConfigError(f"{_setting('calib_batches')} must be at least 1, got {self.calib_batches}")
        if self.targets_ms is not None and (not self.targets_ms or min(self.targets_ms) <= 0):
            raise ConfigError(f"{_setting('targets_ms')} must be positive, got {list(self.targets_ms)}")
        if self.max_noise_pct is not None and not self.max_noise_pct > 0:
            raise ConfigError(f"{_setting('max_noise_pct')}: expected a positive percentage, got {self.max_noise_pct}")
        if not self.lut_budget_s >= 0:
            raise ConfigError(f"{_setting('lut_budget_s')}: expected seconds >= 0, got {self.lut_budget_s}")
        if not self.lut_block_ms > 0:
            raise ConfigError(f"{_setting('lut_block_ms')}: expected milliseconds > 0, got {self.lut_block_ms}")
        if self.lut_blocks < 3:
            raise ConfigError(f"{_setting('lut_blocks')}: expected at least 3 blocks, got {self.lut_blocks}")
        if self.lut_reference_every < 1:
            raise ConfigError(f"{_setting('lut_reference_every')} must be at least 1, got {self.lut_reference_every}")


def _setting(name: str) -> str:
    return field_label(PipelineSettings, name, "pipeline")
