"""bench.fresh_clone reads the demo's own closing line: the pipeline's stage total beside `make demo`'s wall time."""

from bench.fresh_clone import STAGES
from ofa.pipeline.summary import format_seconds


def test_the_stage_total_is_read_from_the_line_the_pipeline_prints():
    line = format_seconds({"train": 41.5, "collect": 4.4, "lut": 37.4, "fit": 0.6, "search": 2.5, "export": 8.0})
    output = f"[export arch_0.05ms] running\n{line}\nwrote runs/digits/summary.md\n"
    assert STAGES.findall(output) == ["94.4"]
    assert STAGES.findall("stage seconds: train 0.0 (total 0.0)") == ["0.0"]
    assert STAGES.findall("no closing line: the demo failed") == []
