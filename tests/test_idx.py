"""Fashion-MNIST from local IDX files (plain or gzipped, flat or torchvision layout), subsets, missing data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import fake_fashion, write_idx

from ofa.cli import main
from ofa.data.datasets import build_data
from ofa.data.idx import FASHION_MNIST_CLASSES, read_idx
from ofa.train import load_recipe
from ofa.utils.errors import OFAError

ROOT = Path(__file__).resolve().parents[1]
FASHION = ROOT / "recipes" / "fashion_mnist.yaml"


def test_read_idx_round_trips_plain_and_gzipped(tmp_path):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        write_idx(tmp_path / name, a)
        assert np.array_equal(read_idx(tmp_path / name), a)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(OFAError, match="not an IDX file"):
        read_idx(tmp_path / "bad")
    write_idx(tmp_path / "short", a)
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-3])
    with pytest.raises(OFAError, match="truncated"):
        read_idx(tmp_path / "short")


@pytest.mark.parametrize("layout", ["flat-gz", "torchvision-raw"])
def test_fashion_mnist_reads_either_layout_with_stratified_subsets(tmp_path, layout):
    folder = tmp_path / "FashionMNIST" / "raw" if layout == "torchvision-raw" else tmp_path
    written = fake_fashion(folder, gz=layout == "flat-gz")
    cfg = {
        "name": "fashion_mnist",
        "root": str(tmp_path),
        "image_size": 16,
        "augment": "none",
        "train_subset": 100,
        "test_subset": 40,
        "val_fraction": 0.2,
    }
    b = build_data(cfg)
    assert (len(b.train), len(b.val), len(b.test)) == (80, 20, 40)
    assert b.class_names == list(FASHION_MNIST_CLASSES) and b.in_channels == 1 and b.train[0][0].shape == (1, 16, 16)
    labels = b.train.source.tensors[1].numpy()
    for split in (b.train, b.val):  # stratified: every class equally often
        assert np.bincount(labels[split.indices], minlength=10).tolist() == [len(split) // 10] * 10
    test_labels = b.test.source.tensors[1].numpy()[b.test.indices]
    assert np.bincount(test_labels, minlength=10).tolist() == [4] * 10
    assert not set(b.train.indices) & set(b.val.indices)  # validation is carved from the train subset
    again = build_data(cfg)
    assert np.array_equal(again.train.indices, b.train.indices) and np.array_equal(again.test.indices, b.test.indices)
    other = build_data({**cfg, "seed": 1})
    assert not np.array_equal(other.train.indices, b.train.indices)  # the subset is drawn by the data seed
    whole = build_data({**cfg, "train_subset": None, "test_subset": None})
    assert len(whole.train) + len(whole.val) == len(written["train"]) and len(whole.test) == len(written["t10k"])
    brightness = [float(b.test[i][0].mean()) for i in range(len(b.test))]  # class order survives the resize
    assert np.corrcoef(brightness, test_labels)[0, 1] > 0.99


def test_missing_fashion_mnist_is_one_line_that_says_how_to_get_it(tmp_path, capsys):
    with pytest.raises(OFAError) as info:
        load_recipe(FASHION, [f"data.root={tmp_path}"])
    message = str(info.value)
    assert "\n" not in message and "data.root" in message and "apt-get install dataset-fashion-mnist" in message
    assert "--set data.root=DIR" in message and str(tmp_path) in message
    assert main(["train", str(FASHION), "--set", f"data.root={tmp_path}", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dataset-fashion-mnist" in err and not (tmp_path / "run").exists()


def test_fashion_recipe_space_is_at_least_as_rich_as_digits(tmp_path):
    fake_fashion(tmp_path, gz=False)
    r = load_recipe(FASHION, [f"data.root={tmp_path}"])
    digits = load_recipe(ROOT / "recipes" / "digits.yaml")
    for key in ("kernels", "expands", "depths"):
        assert set(getattr(digits.space, key)) <= set(getattr(r.space, key))
    assert len(r.space.resolutions) >= 2 and r.data.name == "fashion_mnist" and r.data.test_subset is None
    assert r.data.train_subset is None or r.data.train_subset >= 10000


def test_subset_keys_are_checked():
    with pytest.raises(OFAError, match=r"data\.train_subset"):
        load_recipe(ROOT / "recipes" / "digits.yaml", ["data.train_subset=1"])
