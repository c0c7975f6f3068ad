"""Datasets by name, deterministic splits and augmentation, sharded and resumable loaders."""

from __future__ import annotations

import itertools
import json
import struct

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from bench import augment_speed
from ofa.data.augment import RandomAffineGrid, affine
from ofa.data.config import DataConfig
from ofa.data.datasets import ImageSplit, build_data, data_from_meta
from ofa.data.loaders import LoaderOptions, make_loader, set_loader_epoch
from ofa.train import bn
from ofa.utils.config import ConfigError
from ofa.utils.errors import OFAError


def _all(ds) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*(ds[i] for i in range(len(ds))))
    return torch.stack(xs), torch.tensor(ys)


def test_digits_splits_are_stratified_disjoint_and_normalized():
    b = build_data({"name": "digits", "image_size": 16, "augment": "none"})
    assert (len(b.train), len(b.val), len(b.test)) == (1293, 144, 360)
    assert b.num_classes == 10 and b.class_names == [str(i) for i in range(10)] and b.in_channels == 1
    ids = [set(s.indices.tolist()) for s in (b.train, b.val, b.test)]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2]) and len(set.union(*ids)) == 1797
    x, _ = _all(b.train)
    assert x.shape == (1293, 1, 16, 16) and x.dtype == torch.float32
    assert abs(x.mean().item()) < 1e-3 and abs(x.std().item() - 1) < 1e-2  # normalized with train statistics
    _, y_test = _all(b.test)
    counts = torch.bincount(y_test, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # 20% of each class (~180 images per class)


def test_val_size_takes_validation_from_outside_the_training_subset():
    base = {"name": "digits", "image_size": 8, "augment": "none", "train_subset": 500}
    small, large = build_data({**base, "val_size": 200}), build_data({**base, "val_size": 900})
    assert (len(small.train), len(small.val), len(large.val)) == (500, 200, 900)
    train = set(small.train.indices.tolist())
    assert train == set(large.train.indices.tolist())  # a larger validation split costs no training image
    assert not train & set(large.val.indices.tolist()) and not train & set(large.test.indices.tolist())
    assert set(small.test.indices.tolist()) == set(build_data(base).test.indices.tolist())  # test untouched
    _, y = _all(large.val)
    assert torch.bincount(y, minlength=10).min() >= 85  # stratified: ~90 images of each class
    whole = build_data({"name": "digits", "image_size": 8, "augment": "none", "val_size": 300})
    assert (len(whole.train), len(whole.val)) == (1137, 300)  # no subset: the rest of the split trains
    with pytest.raises(ConfigError, match=r"data.val_size: 1000 validation images asked, the train split has 937"):
        build_data({**base, "val_size": 1000})
    with pytest.raises(ConfigError, match=r"data.val_size: must be a positive number"):
        build_data({**base, "val_size": 0})
    # a recipe without the key digests as before it existed, so runs cached under that digest stay found
    assert "val_size" not in DataConfig().to_dict() and DataConfig(val_size=5).to_dict()["val_size"] == 5


def test_val_seed_draws_another_validation_split_and_keeps_the_test_split():
    base = {"name": "digits", "image_size": 8, "augment": "none"}
    ids = {
        k: build_data({**base, **k_cfg})
        for k, k_cfg in (("default", {}), ("0", {"val_seed": 0}), ("1", {"val_seed": 1}))
    }
    val = {k: set(b.val.indices.tolist()) for k, b in ids.items()}
    assert val["default"] == val["0"] and val["1"] != val["0"] and len(val["1"]) == 144  # null: the data seed
    assert len(set.union(*(set(b.test.indices.tolist()) for b in ids.values()))) == 360  # one test split for all
    assert not val["1"] & set(ids["1"].train.indices.tolist())
    with pytest.raises(ConfigError, match=r"data.val_seed: must be >= 0 or null"):
        build_data({**base, "val_seed": -1})
    assert "val_seed" not in DataConfig().to_dict() and DataConfig(val_seed=3).to_dict()["val_seed"] == 3


def test_augmentation_is_seeded_per_epoch_and_train_only():
    b = build_data({"name": "digits", "image_size": 16})
    a0 = b.train[5][0]
    assert torch.equal(a0, b.train[5][0])  # same epoch: same augmentation
    b.train.set_epoch(1)
    assert not torch.equal(a0, b.train[5][0])
    rebuilt = build_data({"name": "digits", "image_size": 16})
    assert torch.equal(a0, rebuilt.train[5][0])  # fresh process, same seed: same images
    assert torch.equal(b.val[3][0], rebuilt.val[3][0])
    plain = build_data({"name": "digits", "image_size": 16, "augment": "none"})
    assert torch.equal(plain.test[0][0], b.test[0][0])  # evaluation images are never augmented
    assert b.mean == plain.mean


def test_calibration_reads_the_training_images_augmented_or_as_evaluation_transforms_them():
    augmented = build_data({"name": "digits", "image_size": 16})
    assert augmented.calib is augmented.train  # the default: as training reads them
    plain = build_data({"name": "digits", "image_size": 16, "calib_augment": False})
    same_images = build_data({"name": "digits", "image_size": 16, "augment": "none"})
    assert np.array_equal(plain.calib.indices, plain.train.indices)
    for i in (0, 7, len(plain.calib) - 1):
        assert torch.equal(plain.calib[i][0], same_images.train[i][0])  # evaluation's transform, no augmentation
        assert not torch.equal(plain.calib[i][0], plain.train[i][0])
        assert plain.calib[i][1] == plain.train[i][1]
    assert torch.equal(plain.train[5][0], augmented.train[5][0])  # training itself is unchanged
    # a recipe that leaves it at its default digests as before the key existed (cached runs stay found)
    assert (
        "calib_augment" not in DataConfig().to_dict()
        and DataConfig(calib_augment=False).to_dict()["calib_augment"] is False
    )
    with pytest.raises(ConfigError, match=r"data.calib_augment"):
        build_data({"name": "digits", "calib_augment": "sometimes"})


def test_splits_keep_each_image_once_transformed_and_augment_it_anew():
    b = build_data({"name": "digits", "image_size": 16})
    first = b.val[3][0]
    assert b.val[3][0] is first and len(b.val.memo) == 1  # the second read is the kept tensor
    fresh = ImageSplit(b.val.source, b.val.indices, b.val.transform)
    assert fresh.memo is None and torch.equal(fresh[3][0], first)  # the same image as transforming anew
    augmented = b.train[3][0]
    assert len(b.train.memo) == 1 and b.train.memo[int(b.train.indices[3])].shape == augmented.shape  # the resize
    unkept = ImageSplit(b.train.source, b.train.indices, b.train.transform, b.train.augment, b.train.seed)
    assert torch.equal(unkept[3][0], augmented) and b.train[3][0] is not augmented  # kept or not: one image
    b.train.set_epoch(1)
    assert not torch.equal(b.train[3][0], augmented)  # a new augmentation every epoch


@pytest.mark.parametrize("size", [(16, 16), (12, 20)])
def test_light_augmentation_is_torchvisions_random_affine_pixel_for_pixel(size):
    ours = RandomAffineGrid(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1))
    theirs = v2.RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1))
    images = torch.rand(300, 2, *size)
    for seed, image in enumerate(images):
        torch.manual_seed(seed)
        expected = theirs(image)
        torch.manual_seed(seed)
        assert torch.equal(ours(image), expected), seed  # the same draws, the same warp
    shifted = affine(images[0], 0.0, (2, -1), 1.0)  # x right, y up: zeros come in on the left and bottom
    assert torch.equal(shifted[:, :-1, 2:], images[0][:, 1:, :-2]) and not shifted[:, :, :2].any()
    plain = build_data({"name": "digits", "image_size": 16, "augment": "none"})
    assert plain.train.memo is not None and torch.equal(plain.train[7][0], plain.train[7][0])


def test_synthetic_is_configurable_deterministic_and_learnable():
    from sklearn.linear_model import LogisticRegression

    cfg = {
        "name": "synthetic",
        "image_size": 12,
        "augment": "none",
        "synthetic": {"train_size": 300, "test_size": 120, "num_classes": 5, "channels": 3},
    }
    b = build_data(cfg)
    assert (len(b.train) + len(b.val), len(b.test), b.num_classes, b.in_channels) == (300, 120, 5, 3)
    x, y = _all(b.train)
    assert x.shape[1:] == (3, 12, 12)
    assert torch.equal(x, _all(build_data(cfg).train)[0])
    xt, yt = _all(b.test)
    clf = LogisticRegression(max_iter=500).fit(x.flatten(1).numpy(), y.numpy())
    assert clf.score(xt.flatten(1).numpy(), yt.numpy()) > 0.9


def test_ranks_together_see_the_single_process_global_batches():
    ds = build_data({"name": "synthetic", "image_size": 8, "augment": "none"}).train
    single = make_loader(ds, 12, shuffle=True, seed=3, drop_last=True).batch_sampler
    ranks = [
        make_loader(
            ds, 6, shuffle=True, seed=3, drop_last=True, options=LoaderOptions(rank=r, world_size=2)
        ).batch_sampler
        for r in range(2)
    ]
    for epoch in (0, 1):
        single.set_epoch(epoch)
        for s in ranks:
            s.set_epoch(epoch)
        glob = list(single)
        assert len(glob) == len(ds) // 12 and all(len(b) == 12 for b in glob)
        assert [a + b for a, b in zip(*(list(s) for s in ranks))] == glob
    single.set_epoch(0)
    first = list(single)
    single.set_epoch(1)
    assert list(single) != first  # a new order each epoch...
    single.set_epoch(0, start_batch=3)
    assert list(single) == first[3:] and len(single) == len(first) - 3  # ...and resumable mid-epoch


def test_evaluation_shards_cover_every_image_once():
    ds = build_data({"name": "synthetic", "image_size": 8, "augment": "none"}).test
    seen = []
    for r in range(3):
        loader = make_loader(ds, 10, shuffle=False, seed=0, options=LoaderOptions(rank=r, world_size=3))
        for _, y in loader:
            seen.append(len(y))
        seen_idx = [i for b in loader.batch_sampler for i in b]
        assert len(set(seen_idx)) == len(seen_idx)
    assert sum(seen) == len(ds)


def test_loader_epoch_drives_augmentation_too():
    b = build_data({"name": "synthetic", "image_size": 8, "synthetic": {"noise": 0.1}})
    loader = make_loader(b.train, 8, shuffle=True, seed=0, drop_last=True)
    set_loader_epoch(loader, 2)
    x2 = next(iter(loader))[0]
    set_loader_epoch(loader, 0)
    x0 = next(iter(loader))[0]
    set_loader_epoch(loader, 2)
    assert torch.equal(next(iter(loader))[0], x2) and not torch.equal(x0, x2)


def test_worker_processes_do_not_change_the_images():
    b = build_data({"name": "synthetic", "image_size": 8})
    batches = {}
    for workers in (0, 2):
        loader = make_loader(
            b.train, 16, shuffle=True, seed=1, drop_last=True, options=LoaderOptions(num_workers=workers)
        )
        set_loader_epoch(loader, 3, start_batch=1)
        batches[workers] = [x for x, _ in loader]
    assert len(batches[0]) == len(b.train) // 16 - 1
    assert all(torch.equal(a, c) for a, c in zip(batches[0], batches[2]))


def test_data_from_meta_rebuilds_the_same_splits():
    cfg = DataConfig(name="digits", image_size=12)
    b = build_data(cfg)
    again = data_from_meta({"data": cfg.to_dict(), **b.meta()})
    assert again.mean == b.mean and again.class_names == b.class_names and again.image_size == 12
    assert torch.equal(_all(again.test)[0], _all(b.test)[0])
    with pytest.raises(OFAError, match="no 'data' section"):
        data_from_meta({"mean": [0.0]})


def _write_idx(path, array: np.ndarray) -> None:
    magic = 0x0800 | (0x03 if array.ndim == 3 else 0x01)
    path.write_bytes(struct.pack(f">I{array.ndim}I", magic, *array.shape) + array.astype(np.uint8).tobytes())


def test_torchvision_dataset_from_a_local_root(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 60), ("t10k", 20)):
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 255, (n, 28, 28)))
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10)
    b = build_data({"name": "mnist", "root": str(tmp_path), "image_size": 16, "augment": "light"})
    assert (len(b.train) + len(b.val), len(b.test)) == (60, 20)
    assert b.in_channels == 1 and b.num_classes == 10 and b.class_names[0].startswith("0")
    x, y = b.train[0]
    assert x.shape == (1, 16, 16) and isinstance(y, int)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(OFAError, match=r"data\.root: cannot read mnist from .*empty \(nothing is downloaded\)"):
        build_data({"name": "mnist", "root": str(empty)})


def test_imagefolder_tree(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 10), ("val", 3)):
        for cls in ("cat", "dog"):
            folder = tmp_path / split / cls
            folder.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    b = build_data(
        {
            "name": "imagefolder",
            "root": str(tmp_path),
            "test_split": "val",
            "image_size": 16,
            "augment": "crop_flip",
            "val_fraction": 0.2,
        }
    )
    assert (len(b.train), len(b.val), len(b.test)) == (16, 4, 6)
    assert b.class_names == ["cat", "dog"] and b.in_channels == 3 and len(b.mean) == 3
    assert b.train[0][0].shape == (3, 16, 16) and b.test[0][0].shape == (3, 16, 16)
    with pytest.raises(OFAError, match=r"data\.test_split: .*test does not exist"):
        build_data({"name": "imagefolder", "root": str(tmp_path), "test_split": "test"})


def _calibration(monkeypatch, keep_bytes: int | None = None):
    """A calibration set over an augmented training split, counting the images the split augments."""
    if keep_bytes is not None:
        monkeypatch.setattr(bn, "KEEP_BYTES", keep_bytes)
    train = build_data({"name": "digits", "image_size": 8, "augment": "light"}).train
    reads = []
    augment = train.augment
    monkeypatch.setattr(train, "augment", lambda image: reads.append(1) or augment(image))
    return train, make_loader(train, 32, shuffle=True, seed=1), reads


def test_calibration_batches_are_drawn_once_at_epoch_zero_whatever_the_training_epoch(monkeypatch):
    train, loader, reads = _calibration(monkeypatch)
    set_loader_epoch(loader, 0)
    expected = [b[0].clone() for _, b in zip(range(3), loader)]
    reads.clear()
    calib = bn.CalibrationBatches(loader)
    train.set_epoch(5)  # training moved on: calibration images stay those of epoch 0
    first = [b[0] for b in itertools.islice(calib, 2)]
    assert len(reads) == 2 * 32  # exactly the batches used: none drawn past them
    train.set_epoch(7)
    again = [b[0] for b in itertools.islice(calib, 3)]  # two replayed, the third drawn at epoch 0
    assert len(reads) == 3 * 32
    assert all(torch.equal(a, e) for a, e in zip(first, expected)) and len(again) == 3
    assert all(torch.equal(a, e) for a, e in zip(again, expected))
    list(itertools.islice(calib, 3))
    assert len(reads) == 3 * 32  # replayed: nothing augmented again


def test_calibration_batches_over_the_memory_cap_are_drawn_again_the_same(monkeypatch):
    _, loader, reads = _calibration(monkeypatch, keep_bytes=0)
    calib = bn.CalibrationBatches(loader)
    first = [b[0] for b in itertools.islice(calib, 2)]
    second = [b[0] for b in itertools.islice(calib, 2)]
    assert len(reads) == 4 * 32 and all(torch.equal(a, b) for a, b in zip(first, second))


def test_augment_speed_bench_times_both_ways_on_the_same_images(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["augment_speed", "--rounds", "2", "--json"])
    assert augment_speed.main() == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (
        result["same_images"]
        and result["rounds"] == 2
        and result["images"] == len(build_data({"name": "digits", "image_size": 16}).train)
    )
    assert result["torchvision_us_per_image"] > 0 and result["ofa_us_per_image"] > 0
