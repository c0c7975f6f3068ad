"""The main job, `ofa pipeline`: train → latency table → predictor → search → export (`stages`), and its
closing table (`summary`)."""

from ofa.pipeline.stages import TARGET_FRACTIONS, Pipeline, PipelineConfig, PipelineResult, round_up, run_pipeline
from ofa.pipeline.summary import budget_cell, budget_notes

__all__ = [
    "TARGET_FRACTIONS",
    "Pipeline",
    "PipelineConfig",
    "PipelineResult",
    "budget_cell",
    "budget_notes",
    "round_up",
    "run_pipeline",
]
