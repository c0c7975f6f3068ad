"""`bench.pipeline_threads`: each configuration reruns the stages after training from the same trained folder,
interleaved, with a busy program beside it only when asked; its figures are medians of the runs."""

from __future__ import annotations

import json
from pathlib import Path

from bench import pipeline_threads


def test_runs_interleave_from_the_trained_folder_and_a_busy_program_runs_only_when_asked(tmp_path, monkeypatch):
    base = tmp_path / "base"
    base.mkdir()
    (base / "supernet.pt").write_bytes(b"weights")
    (base / "pipeline.json").write_text(json.dumps({"train": "key", "collect": "other", "lut": "x"}))
    calls, hogs = [], []
    stage_seconds = iter([1, 2, 9, 3, 4, 10] * 2)  # collect per run, in call order (the other stages: 0.5 each)

    def fake_pipeline(cfg, log):
        state = json.loads((Path(cfg.out) / "pipeline.json").read_text())
        assert state == {"train": "key"} and (Path(cfg.out) / "supernet.pt").read_bytes() == b"weights"
        assert cfg.lut == base / "latency_table.yaml"
        calls.append((cfg.threads, bool(hogs) and hogs[-1].poll() is None))
        seconds = {"train": 0.0, "lut": 0.0, "collect": float(next(stage_seconds))}
        return type("Result", (), {"seconds": {**seconds, "fit": 0.5, "search": 0.5, "export": 0.5}})

    popen = pipeline_threads.subprocess.Popen
    monkeypatch.setattr(pipeline_threads, "run_pipeline", fake_pipeline)
    monkeypatch.setattr(pipeline_threads.subprocess, "Popen", lambda *a, **k: hogs.append(popen(*a, **k)) or hogs[-1])
    idle = pipeline_threads.measure(base, tmp_path, [1, 2, 4], repeat=2, busy=False)
    assert calls == [(1, False), (2, False), (4, False)] * 2 and not hogs  # interleaved, nothing beside them
    # each figure: the median of its runs (collect 1 and 3 for one thread, 2 and 4 for two, 9 and 10 for four)
    assert idle == {
        "1": {"seconds": 3.5, "stages": {"collect": 2.0, "fit": 0.5, "search": 0.5, "export": 0.5}},
        "2": {"seconds": 4.5, "stages": {"collect": 3.0, "fit": 0.5, "search": 0.5, "export": 0.5}},
        "4": {"seconds": 11.0, "stages": {"collect": 9.5, "fit": 0.5, "search": 0.5, "export": 0.5}},
    }
    calls.clear()
    pipeline_threads.measure(base, tmp_path, [1, 2, 4], repeat=2, busy=True)
    assert calls == [(1, True), (2, True), (4, True)] * 2  # the busy program ran beside every run...
    assert len(hogs) == 1 and hogs[0].poll() is not None  # ...and is gone after them
