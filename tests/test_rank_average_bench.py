"""`bench.rank_average`: its whole-gradient baseline averages to the same values as the trainer's average and
differs from it only in what it sends and in leaving the corner buffers untracked."""

import pytest
import torch
from helpers import resnet_after_a_small_step

from bench import rank_average
from ofa.train.distributed import DistEnv, average_gradients


def small_step_gradients() -> list[torch.nn.Parameter]:
    net = resnet_after_a_small_step()[0]
    return [p for p in net.parameters() if p.grad is not None]


def test_the_baseline_averages_alike_but_sends_everything_and_leaves_buffers_untracked(monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda t: sent.append(t.numel()))  # the other rank: zeros
    env = DistEnv(0, 2, 0, torch.device("cpu"))
    averaged = {}
    for name, average in (("trainer", average_gradients), ("whole", rank_average.average_whole)):
        params = small_step_gradients()
        average(params, env)
        averaged[name] = [p.grad.clone() for p in params]
        buffers = [b for p in params if (b := getattr(p.grad, "corner_buffer", None)) is not None]
        assert buffers and all(b.written_elsewhere() is (name == "whole") for b in buffers)
    assert all(torch.equal(a, b) for a, b in zip(averaged["trainer"], averaged["whole"]))
    assert sent[1] == sum(g.numel() for g in averaged["whole"]) > sent[0]


def test_summary_is_the_median_per_round_ratio():
    times = {"trainer_min": [1.0, 2.0, 4.0], "whole_min": [2.0, 2.0, 2.0]}
    result = rank_average.last_json(rank_average.summary(times, ["min"]))
    assert result["ratio_min"] == 1.0 and result["step_ms"] == {"trainer_min": 2000.0, "whole_min": 2000.0}


@pytest.mark.parametrize("flags", [["--rounds", "0"], ["--batch", "x"]])
def test_bad_flags_exit_with_a_usage_error(flags, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["rank_average", *flags])
    with pytest.raises(SystemExit) as exited:
        rank_average.main()
    assert exited.value.code == 2 and "usage" in capsys.readouterr().err
