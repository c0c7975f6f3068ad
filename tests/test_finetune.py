"""``ofa finetune``: one subnet trained as a timm model, resumable bit for bit after SIGKILL."""

from __future__ import annotations

import json
import random
import signal
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY_RECIPE, kill_at_step, perturb

from ofa.cli import main
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.families.mbv3.transfer import rehead
from ofa.families.subnet_file import load_subnet
from ofa.runtime.convert import read_metadata
from ofa.train import load_recipe
from ofa.train.finetune import finetune, load_finetune_recipe
from ofa.utils.errors import OFAError
from ofa.utils.io import file_sha256

RECIPE = Path(__file__).resolve().parent / "recipes" / "finetune_tiny.yaml"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    """A supernet of the tiny recipe's space and a mid-sized arch of it, as files."""
    folder = tmp_path_factory.mktemp("finetune")
    space = load_recipe(TINY_RECIPE).space
    torch.manual_seed(0)
    supernet = perturb(OFAMobileNetV3(space)).save(folder / "supernet.pt")
    arch = Arch(8, (2, 1), (3, 5, 5, 3), (3, 2, 2, 3)).save(folder / "arch.json")
    return supernet, arch


@pytest.fixture(scope="module")
def reference(files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main(["finetune", str(RECIPE), "--supernet", str(files[0]), "--arch", str(files[1]), "--out", str(out)]) == 0
    return out


def _rows(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def test_finetuned_subnet_is_a_loadable_timm_model_that_learned(reference, files):
    model = load_subnet(reference / "subnet.pt")
    assert type(model).__name__ == "MobileNetV3"
    assert model.ofa_meta["arch"] == Arch.load(files[1])
    rows = _rows(reference)
    epochs = [r for r in rows if r["kind"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [1, 2, 3, 4]
    assert epochs[-1]["loss"] < epochs[0]["loss"]
    assert rows[-1]["kind"] == "test" and rows[-1]["test_top1"] > 40.0  # 4 classes: chance is 25%
    assert model.ofa_meta["test_top1"] == rows[-1]["test_top1"]
    start = OFAMobileNetV3.load(files[0]).extract(Arch.load(files[1]))
    assert not torch.equal(start.conv_stem.weight, model.conv_stem.weight)  # it trained


def test_finetune_writes_tensorboard_events_that_match_metrics(reference):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = [json.loads(line) for line in (reference / "metrics.jsonl").read_text().splitlines()]
    epochs, test = [r for r in rows if r["kind"] == "epoch"], rows[-1]
    events = EventAccumulator(str(reference / "tensorboard"), size_guidance={"scalars": 0})  # 0: keep every value
    events.Reload()
    series = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    per_epoch = {"train/loss": "loss", "train/lr": "lr", "val_top1/subnet": "val_top1"}
    assert set(series) == {*per_epoch, "test_top1/subnet", "train/step_loss", "train/step_lr"}
    for tag, key in per_epoch.items():
        assert [s for s, _ in series[tag]] == [r["step"] for r in epochs], tag
        assert [v for _, v in series[tag]] == pytest.approx([r[key] for r in epochs], rel=1e-6), tag
    assert series["test_top1/subnet"] == [(test["step"], pytest.approx(test["test_top1"], rel=1e-6))]
    steps = [s for s, _ in series["train/step_loss"]]
    assert steps == list(range(1, test["step"] + 1)) == [s for s, _ in series["train/step_lr"]]
    last_of_epoch = [v for s, v in series["train/step_lr"] if s in {r["step"] for r in epochs}]
    assert last_of_epoch == pytest.approx([r["lr"] for r in epochs], rel=1e-6)


def test_sigkill_then_resume_is_bitwise_identical(reference, files, tmp_path):
    out = tmp_path / "run"
    kill_after = random.randint(2, 4 * 9 - 8)  # 4 epochs of 9 steps
    argv = ["finetune", str(RECIPE), "--supernet", str(files[0]), "--arch", str(files[1]), "--out", str(out)]
    returncode = kill_at_step([sys.executable, "-m", "ofa", *argv], out / "checkpoints", kill_after)
    assert returncode == -signal.SIGKILL, f"the run ended before it could be killed (after step {kill_after})"
    assert not (out / "subnet.pt").exists()
    assert main([*argv, "--resume"]) == 0
    ref = torch.load(reference / "subnet.pt", weights_only=True)["state_dict"]
    got = torch.load(out / "subnet.pt", weights_only=True)["state_dict"]
    assert [k for k in ref if not torch.equal(ref[k], got[k])] == [], f"killed after step >= {kill_after}"
    assert _rows(out) == _rows(reference)


def test_refusals_are_one_line(files, tmp_path, reference):
    supernet = OFAMobileNetV3.load(files[0])
    arch = Arch.load(files[1])
    recipe = load_finetune_recipe(RECIPE)
    fresh = rehead(supernet, 4)
    with pytest.raises(OFAError, match="re-headed and its classifier is untrained") as err:
        finetune(fresh, arch, recipe, tmp_path / "a")
    assert "\n" not in str(err.value)
    with pytest.raises(OFAError, match="num_classes is 10 but the synthetic data has 4"):
        finetune(rehead(supernet, 10), arch, load_finetune_recipe(RECIPE, ["distill.teacher=none"]), tmp_path / "b")
    with pytest.raises(OFAError, match="already holds a fine-tuning run"):
        finetune(supernet, arch, recipe, reference)
    with pytest.raises(OFAError, match=r"epochs: must be >= 1"):
        load_finetune_recipe(RECIPE, ["epochs=0"])
    with pytest.raises(OFAError, match=r"distill\.teacher: 'teacher' is not one of"):
        load_finetune_recipe(RECIPE, ["distill.teacher=teacher"])


def test_official_subnet_config_is_accepted_as_arch(files, tmp_path):
    arch = Arch.load(files[1])
    official = tmp_path / "official.json"
    official.write_text(json.dumps({**arch.to_ofa_config(), "r": [arch.resolution]}))
    out = tmp_path / "run"
    assert (
        main(
            [
                "finetune",
                str(RECIPE),
                "--supernet",
                str(files[0]),
                "--arch",
                str(official),
                "--out",
                str(out),
                "--set",
                "epochs=1",
                "--set",
                "distill.teacher=none",
            ]
        )
        == 0
    )
    assert load_subnet(out / "subnet.pt").ofa_meta["arch"] == arch


def test_export_subnet_keeps_the_finetuned_weights_and_checks_parity(reference, files, tmp_path, capsys):
    subnet = reference / "subnet.pt"
    out = tmp_path / "ft.onnx"
    assert main(["export", "--subnet", str(subnet), "--out", str(out), "--no-latency"]) == 0
    assert "BN recalibration: none (the fine-tuned subnet's own statistics)" in capsys.readouterr().out
    result = json.loads(out.with_suffix(".export.json").read_text())
    assert result["bn_batches"] == 0 and result["parity"]["ok"] and result["parity"]["real_inputs"] > 0
    assert result["finetuned_sha256"] == file_sha256(subnet)
    assert result["supernet_sha256"] == file_sha256(files[0])  # traced back through the fine-tuned file
    # Not recalibrated: the exported static model is the fine-tuned one, weight for weight and statistic for statistic.
    tuned, exported = load_subnet(subnet), load_subnet(out.with_suffix(".pt"))
    assert all(torch.equal(v, exported.state_dict()[k]) for k, v in tuned.state_dict().items())
    # Same model, same test split (rebuilt from the file's meta): the ONNX model's top-1 is the fine-tune's.
    assert result["top1_fp32"] == pytest.approx(tuned.ofa_meta["test_top1"])
    meta = read_metadata(out)
    assert meta["arch"] == tuned.ofa_meta["arch"] and meta["bn_recalibration_batches"] == 0
    assert meta["finetuned_sha256"] == file_sha256(subnet)
    assert "fine-tuned as a standalone model" in out.with_suffix(".md").read_text()


def test_export_subnet_refusals_are_one_line(reference, files, tmp_path, capsys):
    subnet, out = str(reference / "subnet.pt"), str(tmp_path / "m.onnx")
    cases = {
        "give it without --supernet and --arch": ["--subnet", subnet, "--arch", str(files[1]), "--out", out],
        "--supernet (with --arch) or --subnet": ["--out", out],
        "not an ofa subnet file (format='ofa-supernet')": ["--subnet", str(files[0]), "--out", out],
    }
    for message, argv in cases.items():
        assert main(["export", *argv]) == 2, message
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("ofa export: error:") and message in err[-1], (message, err)
    assert not list(tmp_path.iterdir())
