"""Model folders for timm and the Hub, safetensors supernets, no pickle, and `ofa push` against a stand-in."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import FAST, perturb, tiny_space
from huggingface_hub import ModelCard
from test_export import fake_data, ort_logits

from ofa import OFAMobileNetV3, load_subnet
from ofa.cli import main
from ofa.export.export import ExportConfig, export_subnet
from ofa.export.push import PushConfig, push_folder
from ofa.families.mbv3.encoding import sample_arch
from ofa.lut.timing import Standalone
from ofa.utils.errors import OFAError

ROOT = Path(__file__).resolve().parent.parent


class ShortStandalone(Standalone):
    """Patched in for `Standalone`, the protocol an export without a table times with: a short one (what the
    card and the result report is what was measured, whatever the protocol)."""

    def __new__(cls, *args, **kwargs):
        return FAST


# Runs the card's timm lines in the folder with `ofa` unimportable, and saves the logits of the given input.
REBUILD = """
import sys
sys.modules["ofa"] = None  # any `import ofa` now fails
import numpy as np, torch
{snippet}
with torch.no_grad():
    logits = model(torch.from_numpy(np.load(sys.argv[1]))).numpy()
np.save(sys.argv[2], logits)
assert not [m for m in sys.modules if m.startswith("ofa.")]
"""


@pytest.fixture(scope="module")
def digits_like() -> OFAMobileNetV3:
    """A supernet shaped like the digits one (1 channel, 10 classes) whose meta names its data."""
    net = perturb(OFAMobileNetV3(tiny_space(in_channels=1)), seed=5).eval()
    net.meta = {"data": {"name": "digits"}}
    return net


@pytest.fixture(scope="module")
def folder(digits_like, tmp_path_factory) -> SimpleNamespace:
    out = tmp_path_factory.mktemp("export") / "subnet"
    arch = sample_arch(digits_like.space, 3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("ofa.lut.measure.Standalone", ShortStandalone)
        result = export_subnet(
            digits_like,
            arch,
            ExportConfig(out, calib_batches=2, batch_size=32, dynamic_batch=True),
            data=fake_data(digits_like.space),
        )
    return SimpleNamespace(path=out, result=result, arch=arch)


def card_snippet(card: str) -> str:
    section = card.split("## Load with timm alone", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_folder_rebuilds_with_timm_and_safetensors_alone(folder, tmp_path):
    assert sorted(p.name for p in folder.path.iterdir()) == [
        "README.md",
        "config.json",
        "model.export.json",
        "model.onnx",
        "model.safetensors",
    ]
    x = torch.randn(3, 1, folder.arch.resolution, folder.arch.resolution, generator=torch.Generator().manual_seed(0))
    np.save(tmp_path / "x.npy", x.numpy())
    script = REBUILD.format(snippet=card_snippet((folder.path / "README.md").read_text()))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
        cwd=folder.path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},  # one thread, as this process: the same kernels, bit for bit
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    timm_logits = np.load(tmp_path / "y.npy")

    ours = load_subnet(folder.path)  # ofa reads the same folder
    assert ours.ofa_meta["arch"] == folder.arch and ours.ofa_meta["dataset"] == "digits"
    with torch.no_grad():
        expected = ours(x).numpy()
    np.testing.assert_array_equal(timm_logits, expected)
    assert np.abs(ort_logits(folder.path / "model.onnx", x.numpy()) - expected).max() <= 1e-4


def test_config_is_timms_and_the_card_parses_with_hub_front_matter(folder, digits_like):
    config = json.loads((folder.path / "config.json").read_text())
    r, space = folder.arch.resolution, digits_like.space
    assert config["architecture"] and config["num_classes"] == 10
    pre = config["pretrained_cfg"]
    assert pre["input_size"] == [1, r, r] and pre["mean"] == [0.5] and pre["std"] == [0.25]
    assert pre["interpolation"] == "bilinear" and pre["num_classes"] == 10
    assert config["label_names"] == [f"class{i}" for i in range(10)]
    assert config["ofa"]["space_fingerprint"] == space.fingerprint() and config["ofa"]["arch"] == folder.arch.to_dict()
    assert config["timm_mobilenetv3"]["arch_def"][0] == [f"ds_r1_k3_s1_e1_c{space.first_channels}_nre"]

    card = ModelCard.load(folder.path / "README.md")
    data = card.data
    assert data.library_name == "timm" and data.datasets == ["digits"] and "once-for-all" in data.tags
    metrics = {e.metric_name: e for e in data.eval_results}
    top1 = metrics["top-1 (fp32 ONNX)"]
    assert top1.metric_type == "accuracy" and top1.metric_value == pytest.approx(folder.result.top1_fp32, abs=1e-3)
    latency = [e for e in data.eval_results if e.metric_type == "latency_ms"]
    assert latency and latency[0].metric_value == pytest.approx(folder.result.latency_fp32.mean_ms, abs=1e-3)
    assert folder.arch.short() in card.text and "load_subnet('<this folder>')" in card.text

    summary = json.loads((folder.path / "model.export.json").read_text())
    assert summary["arch"] == folder.arch.to_dict() and summary["folder"] == str(folder.path)


def test_onnx_out_keeps_todays_files_and_puts_the_folder_beside(digits_like, tmp_path):
    arch = sample_arch(digits_like.space, 4)
    r = export_subnet(
        digits_like,
        arch,
        ExportConfig(tmp_path / "m.onnx", calib_batches=1, batch_size=16, latency=False),
        data=fake_data(digits_like.space),
    )
    assert r.folder == tmp_path / "m" and (tmp_path / "m" / "model.safetensors").is_file()
    x = torch.randn(2, 1, arch.resolution, arch.resolution)
    with torch.no_grad():
        np.testing.assert_array_equal(load_subnet(tmp_path / "m")(x).numpy(), load_subnet(r.subnet_path)(x).numpy())


def test_cli_exports_a_folder_from_a_safetensors_supernet(digits_like, tmp_path, capsys):
    data = {
        "name": "synthetic",
        "image_size": 20,
        "augment": "none",
        "synthetic": {"channels": 1, "num_classes": 10, "train_size": 64, "test_size": 32},
    }
    supernet = digits_like.save(tmp_path / "supernet.safetensors", meta={"data": data})
    arch = sample_arch(digits_like.space, 6).save(tmp_path / "arch.json")
    out = tmp_path / "folder"
    assert (
        main(
            [
                "export",
                "--supernet",
                str(supernet),
                "--arch",
                str(arch),
                "--out",
                str(out),
                "--no-latency",
                "--calib-batches",
                "1",
                "--batch-size",
                "16",
            ]
        )
        == 0
    )
    assert f"model folder (timm/Hub): {out}" in capsys.readouterr().out
    card = ModelCard.load(out / "README.md")
    assert card.data.datasets == ["synthetic"] and card.data.eval_results[0].dataset_split == "test"
    assert load_subnet(out).ofa_meta["arch"] == sample_arch(digits_like.space, 6)
    assert main(["export", "--supernet", str(supernet), "--arch", str(supernet), "--out", str(out)]) == 2
    assert "this is a safetensors weights file, not an arch JSON" in capsys.readouterr().err


def test_folder_errors_are_one_line(digits_like, tmp_path, capsys):
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(OFAError, match="is a file, but the model folder goes there"):
        ExportConfig(tmp_path / "taken.onnx")
    with pytest.raises(OFAError, match=r"config\.json: model folder config not found"):
        load_subnet(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"architecture": "x", "ofa": {"format": "ofa-subnet"}}))
    (broken / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(OFAError, match="not a readable safetensors model weights"):
        load_subnet(broken)


def test_supernet_as_safetensors_without_pickle(digits_like, tmp_path, monkeypatch):
    path = digits_like.save(tmp_path / "supernet.safetensors", meta={"data": {"name": "digits"}, "seed": 3})
    assert path.read_bytes()[:2] != b"PK"  # not a torch zip
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load used for a safetensors file"))
    net = OFAMobileNetV3.load(path).eval()
    assert net.meta == {"data": {"name": "digits"}, "seed": 3}
    x = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        assert torch.equal(net(x), digits_like(x))
    with pytest.raises(OFAError, match="cannot be stored as JSON"):
        digits_like.save(tmp_path / "bad.safetensors", meta={"x": object()})


def test_nothing_loads_a_pickle_but_torch_load_with_weights_only():
    loads = []
    for path in [*ROOT.glob("ofa/**/*.py"), *ROOT.glob("search/**/*.py"), *ROOT.glob("bench/**/*.py")]:
        text = path.read_text()
        for m in re.finditer(r"torch\.load\(([^)]*)\)", text):
            if "weights_only=True" not in m.group(1):
                loads.append(f"{path.name}: {m.group(0)}")
        for needle in ("pickle.load", "allow_pickle=True", "joblib.load", "dill.load", "cloudpickle"):
            if needle in text:
                loads.append(f"{path.name}: {needle}")
    assert not loads


class StandIn:
    """A local stand-in for ``huggingface_hub.HfApi``: records the repo and copies the folder."""

    def __init__(self, store: Path) -> None:
        self.store, self.repos = store, []

    def create_repo(self, repo_id, *, private, exist_ok, repo_type):
        self.repos.append((repo_id, private, exist_ok, repo_type))
        return f"https://hub.test/{repo_id}"

    def upload_folder(self, *, repo_id, folder_path, commit_message, revision, repo_type):
        target = self.store / repo_id
        target.mkdir(parents=True)
        for f in Path(folder_path).iterdir():
            (target / f.name).write_bytes(f.read_bytes())
        return SimpleNamespace(oid="abc123", commit_message=commit_message)


def test_push_uploads_the_folder_and_fails_in_one_line(folder, tmp_path, monkeypatch, capsys):
    hub = StandIn(tmp_path / "hub")
    result = push_folder(PushConfig(folder.path, "me/ofa-digits", private=True), client=hub)
    assert result.url == "https://hub.test/me/ofa-digits" and result.commit == "abc123"
    assert hub.repos == [("me/ofa-digits", True, True, "model")]
    uploaded = sorted(p.name for p in (tmp_path / "hub" / "me" / "ofa-digits").iterdir())
    assert uploaded == sorted(p.name for p in folder.path.iterdir())

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no stored token
    cases = {
        "not logged in to the Hugging Face Hub": ["--repo-id", "me/x"],
        "cannot reach http://127.0.0.1:9 (offline?)": ["--repo-id", "me/x", "--endpoint", "http://127.0.0.1:9"],
        "expected OWNER/NAME": ["--repo-id", "no-owner"],
    }
    for message, argv in cases.items():
        if message.startswith("not logged in"):
            monkeypatch.delenv("HF_TOKEN", raising=False)
        else:
            monkeypatch.setenv("HF_TOKEN", "hf_stand_in")
        assert main(["push", str(folder.path), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ofa push: error:") and message in err[0], (message, err)
    assert main(["push", str(tmp_path), "--repo-id", "me/x"]) == 2
    assert "no model.safetensors" in capsys.readouterr().err
