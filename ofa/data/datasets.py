"""Datasets by name, deterministic splits, and loaders that shard and resume exactly.

Names: ``digits`` (scikit-learn's bundled 8x8 handwritten digits, the embedded default),
``fashion_mnist`` (a local copy of the IDX files, see `ofa.data.idx`), ``synthetic`` (small, generated,
learnable: for tests), ``imagefolder`` (a class-per-folder tree) and any torchvision classification
dataset read from a local ``root`` (never downloaded). ``train_subset`` / ``test_subset`` take a
seeded, stratified subset of either split for quick runs; validation is carved from the train subset.

Every split yields ``(normalized float image C×H×W at the base image size, int label)``; the
training loop resizes batches to the elastic resolution. Random augmentation is seeded per
(seed, epoch, image), and batch order per (seed, epoch), so a run resumed mid-epoch, or one split
over several processes, sees exactly the images an uninterrupted single-process run would.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torchvision.datasets as tvd
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset, TensorDataset
from torchvision.transforms import v2

from ofa.data.augment import RandomAffineGrid
from ofa.data.config import TENSOR_NAMES, DataConfig, parse_data_config, torchvision_class
from ofa.data.idx import FASHION_MNIST_CLASSES, load_split
from ofa.utils.config import ConfigError
from ofa.utils.errors import OFAError

STATS_SAMPLES = 1000  # images used to estimate mean/std when the recipe does not give them


@dataclass
class DataBundle:
    """Train/val/test splits plus what a model and an exporter need to know about the images.

    ``calib`` is the training split as BN recalibration and INT8 calibration read it: ``train`` itself, or its
    images through evaluation's transform (the recipe's ``data.calib_augment``)."""

    train: Dataset
    val: Dataset
    test: Dataset
    calib: Dataset
    num_classes: int
    class_names: list[str]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    in_channels: int
    image_size: int

    def meta(self) -> dict[str, Any]:
        return {
            "mean": list(self.mean),
            "std": list(self.std),
            "class_names": list(self.class_names),
            "image_size": self.image_size,
            "in_channels": self.in_channels,
            "num_classes": self.num_classes,
        }


# --------------------------------------------------------------------------------------- config
def _sample_seed(seed: int, epoch: int, index: int) -> int:
    return hash((seed, epoch, index)) & 0x7FFF_FFFF_FFFF_FFFF


class ImageSplit(Dataset):
    """A subset of a source dataset with its transforms: ``transform`` (steady: the same image every time), then
    ``augment`` (random; None: none).

    ``augment`` draws from torch's RNG re-seeded per (seed, epoch, source index), inside a forked RNG so the
    caller's stream is untouched: results do not depend on worker count, batch position or where a run was
    resumed. ``set_epoch`` selects the epoch.

    ``memo`` keeps each image's steady transform after its first read (the whole transform of an evaluation
    split, or of training without augmentation; the resize before a training split's augmentation): a
    supernet's evaluations read the same images once per subnet, a training run once per epoch and subnet, and
    the transform costs more than the forward pass of a small model. Only for sources already held in memory
    (the tensor data sets), whose transformed copy is of the same order.
    """

    def __init__(
        self,
        source: Dataset,
        indices: Sequence[int],
        transform: Callable,
        augment: Callable | None = None,
        seed: int = 0,
        memo: bool = False,
    ) -> None:
        self.source, self.indices = source, np.asarray(indices, dtype=np.int64)
        self.transform, self.augment = transform, augment
        self.seed, self.epoch = seed, 0
        self.memo: dict[int, torch.Tensor] | None = {} if memo else None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        index = int(self.indices[i])
        image, label = self.source[index]
        if self.memo is None:
            image = self.transform(image)
        else:
            if index not in self.memo:
                self.memo[index] = self.transform(image)
            image = self.memo[index]
        if self.augment is None:
            return image, int(label)
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(_sample_seed(self.seed, self.epoch, index))
            return self.augment(image), int(label)


def _transforms(
    augment: str, size: int, mean: Sequence[float], std: Sequence[float], pil: bool
) -> tuple[Callable, Callable | None, Callable]:
    """Training's steady transform and its random augmentation (None for ``none``), then evaluation's transform;
    PIL sources are converted to float tensors in [0, 1] after their geometric (PIL) steps."""
    to_tensor = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)] if pil else []
    normalize = v2.Normalize(list(mean), list(std))
    steady = [v2.Resize((size, size), antialias=True)]
    evaluate = steady
    on_tensors = []  # augmentations after the tensor conversion
    if augment == "inception":
        steady = [v2.Identity()]  # every step random
        evaluate = [v2.Resize(math.ceil(size / 0.875), antialias=True), v2.CenterCrop(size)]
        geometric = [
            v2.RandomResizedCrop(size, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=32 / 255, saturation=0.5),
        ]
    elif augment == "light":  # v2.RandomAffine's images, at a fraction of its cost per image
        geometric, on_tensors = [], [RandomAffineGrid(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1))]
    elif augment == "crop_flip":
        geometric = [v2.RandomCrop(size, padding=max(1, size // 8)), v2.RandomHorizontalFlip()]
    else:
        geometric = []
    evaluate = v2.Compose([*evaluate, *to_tensor, normalize])
    if augment == "none":
        return v2.Compose([*steady, *to_tensor, normalize]), None, evaluate
    return v2.Compose(steady), v2.Compose([*geometric, *to_tensor, *on_tensors, normalize]), evaluate


def _split(indices: np.ndarray, labels: np.ndarray | None, fraction: float, seed: int) -> tuple[np.ndarray, ...]:
    """Stratified (when labels allow it) seeded split into (keep, held_out); an integer ``fraction`` is a count."""
    strat = labels[indices] if labels is not None else None
    try:
        keep, held = train_test_split(indices, test_size=fraction, stratify=strat, random_state=seed)
    except ValueError:  # a class too rare to stratify: plain seeded split
        keep, held = train_test_split(indices, test_size=fraction, random_state=seed)
    return np.sort(keep), np.sort(held)


def _stats(source: Dataset, indices: np.ndarray, to_tensor: Callable, seed: int) -> tuple[tuple[float, ...], ...]:
    rng = np.random.default_rng(seed)
    chosen = rng.choice(indices, size=min(len(indices), STATS_SAMPLES), replace=False)
    total = sq = None
    count = 0
    for i in chosen:
        x = to_tensor(source[int(i)][0]).double().flatten(1)
        total = x.sum(1) if total is None else total + x.sum(1)
        sq = (x * x).sum(1) if sq is None else sq + (x * x).sum(1)
        count += x.shape[1]
    mean = total / count
    std = (sq / count - mean * mean).clamp_min(1e-12).sqrt()
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


def _digits(cfg: DataConfig) -> tuple[TensorDataset, TensorDataset, list[str]]:
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = _upsample(images, cfg.image_size)
    labels = torch.tensor(digits.target, dtype=torch.int64)
    source = TensorDataset(images, labels)
    return source, source, [str(c) for c in digits.target_names]


def _fashion_mnist(cfg: DataConfig) -> tuple[TensorDataset, TensorDataset, list[str]]:
    def split(name: str) -> TensorDataset:
        images, labels = load_split(cfg.root, name)
        x = torch.from_numpy(images).unsqueeze(1).float() / 255.0
        return TensorDataset(_upsample(x, cfg.image_size, antialias=True), torch.from_numpy(labels))

    return split("train"), split("test"), list(FASHION_MNIST_CLASSES)


def _synthetic(cfg: DataConfig) -> tuple[TensorDataset, TensorDataset, list[str]]:
    syn = cfg.synthetic
    gen = torch.Generator().manual_seed(cfg.seed)
    protos = torch.rand(syn.num_classes, syn.channels, 4, 4, generator=gen)
    protos = _upsample(protos, cfg.image_size)

    def make(n: int) -> TensorDataset:
        labels = torch.arange(n) % syn.num_classes
        noise = syn.noise * torch.randn(n, syn.channels, cfg.image_size, cfg.image_size, generator=gen)
        return TensorDataset((protos[labels] + noise).clamp(0, 1), labels)

    return make(syn.train_size), make(syn.test_size), [f"class{i}" for i in range(syn.num_classes)]


def _upsample(images: torch.Tensor, size: int, antialias: bool = False) -> torch.Tensor:
    if images.shape[-1] == size:
        return images
    return torch.nn.functional.interpolate(
        images, size=(size, size), mode="bilinear", align_corners=False, antialias=antialias
    )


def _subset(indices: np.ndarray, labels: np.ndarray | None, size: int | None, seed: int) -> np.ndarray:
    """A seeded stratified ``size``-image subset of ``indices`` (all of them when ``size`` is null or larger)."""
    if size is None or size >= len(indices):
        return indices
    return _split(indices, labels, len(indices) - size, seed)[0]


def _train_and_val(
    indices: np.ndarray, labels: np.ndarray | None, cfg: DataConfig, source: str
) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) indices of the train split.

    With ``val_size`` the validation images lie outside ``train_subset`` (the images a subset leaves
    over), so a large validation split costs no training images and every choice can be made on it;
    without it, validation is ``val_fraction`` of the subset, as before.
    """
    val_seed = cfg.seed if cfg.val_seed is None else cfg.val_seed
    if cfg.val_size is None:
        return _split(_subset(indices, labels, cfg.train_subset, cfg.seed), labels, cfg.val_fraction, val_seed)
    train = _subset(indices, labels, cfg.train_subset, cfg.seed)
    whole = cfg.train_subset is None  # no subset: validation from the whole split, training on the rest
    left = indices if whole else np.setdiff1d(indices, train)
    if len(left) < cfg.val_size + whole:  # with no subset, one image at least is left to train on
        raise ConfigError(
            f"{source}.val_size: {cfg.val_size} validation images asked, the train split has {len(left)} "
            "outside train_subset"
        )
    if whole:
        return _split(indices, labels, cfg.val_size, val_seed)
    return train, _subset(left, labels, cfg.val_size, val_seed)


def _labels_of(ds: Any) -> np.ndarray | None:
    for attr in ("targets", "labels", "_labels"):
        value = getattr(ds, attr, None)
        if value is not None:
            return np.asarray(value, dtype=np.int64)
    if isinstance(ds, TensorDataset):
        return ds.tensors[1].numpy()
    return None


def _open_torchvision(cfg: DataConfig, where: str) -> tuple[Dataset, Dataset | None, list[str] | None]:
    """Construct a torchvision dataset from disk: (train, test or None, class names or None)."""
    root = cfg.root
    if cfg.name == "imagefolder":
        open_ = tvd.ImageFolder
        train_args: dict[str, Any] = {"root": os.path.join(root, cfg.train_split)}
        test_args = {"root": os.path.join(root, cfg.test_split)} if cfg.test_split else None
    else:
        open_ = torchvision_class(cfg.name)
        params = inspect.signature(open_.__init__).parameters
        base = {"root": root, **({"download": False} if "download" in params else {})}
        if "train" in params:
            train_args, test_args = {**base, "train": True}, ({**base, "train": False} if cfg.test_split else None)
        elif "split" in params:
            train_args = {**base, "split": cfg.train_split}
            test_args = {**base, "split": cfg.test_split} if cfg.test_split else None
        else:
            train_args, test_args = base, None
    try:
        train = open_(**train_args)
        test = open_(**test_args) if test_args is not None else None
    except Exception as exc:  # torchvision raises RuntimeError/FileNotFoundError/ValueError for missing files
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"{where}.root: cannot read {cfg.name} from {root} (nothing is downloaded): {reason}"
        ) from None
    classes = getattr(train, "classes", None)
    if test is not None and classes is not None and getattr(test, "classes", classes) != classes:
        raise ConfigError(
            f"{where}.test_split: the class folders of {cfg.test_split!r} differ from those of {cfg.train_split!r}"
        )
    names = [str(c) for c in classes] if isinstance(classes, list | tuple) else None
    return train, test, names


def build_data(data_cfg: Mapping[str, Any] | DataConfig, source: str = "data") -> DataBundle:
    """Build the train/val/test splits named by a recipe's data section (validated first)."""
    cfg = parse_data_config(data_cfg, source)
    pil = cfg.name not in TENSOR_NAMES
    if cfg.name == "digits":
        pool, test_src, names = _digits(cfg)
    elif cfg.name == "fashion_mnist":
        pool, test_src, names = _fashion_mnist(cfg)
    elif cfg.name == "synthetic":
        pool, test_src, names = _synthetic(cfg)
    else:
        pool, test_src, names = _open_torchvision(cfg, source)
    labels = _labels_of(pool)
    all_idx = np.arange(len(pool))
    if cfg.name == "digits" or (pil and test_src is None):
        all_idx, test_idx = _split(all_idx, labels, cfg.test_fraction, cfg.seed)
        test_src = pool
    else:
        test_idx = np.arange(len(test_src))
    test_idx = _subset(test_idx, labels if test_src is pool else _labels_of(test_src), cfg.test_subset, cfg.seed)
    train_idx, val_idx = _train_and_val(all_idx, labels, cfg, source)
    if len(train_idx) == 0 or len(val_idx) == 0 or len(test_idx) == 0:
        raise ConfigError(f"{source}: too few images to carve train/val/test splits")
    if names is None:
        if labels is None:
            raise ConfigError(f"{source}.name: cannot tell the classes of {cfg.name!r} (no classes or targets)")
        names = [str(i) for i in range(int(labels.max()) + 1)]

    probe = _transforms("none", cfg.image_size, [0.0], [1.0], pil)[0]
    first = probe(pool[int(train_idx[0])][0])
    in_channels = int(first.shape[0])
    if cfg.mean is not None:
        if len(cfg.mean) != in_channels:
            raise ConfigError(f"{source}.mean: {len(cfg.mean)} values for images with {in_channels} channels")
        mean, std = cfg.mean, cfg.std
    else:
        mean, std = _stats(pool, train_idx, probe, cfg.seed)
    train_tf, augment, eval_tf = _transforms(cfg.augment, cfg.image_size, mean, std, pil)
    train = ImageSplit(pool, train_idx, train_tf, augment, cfg.seed, memo=not pil)
    return DataBundle(
        train=train,
        val=ImageSplit(pool, val_idx, eval_tf, memo=not pil),
        test=ImageSplit(test_src, test_idx, eval_tf, memo=not pil),
        calib=train if cfg.calib_augment else ImageSplit(pool, train_idx, eval_tf, memo=not pil),
        num_classes=len(names),
        class_names=names,
        mean=tuple(mean),
        std=tuple(std),
        in_channels=in_channels,
        image_size=cfg.image_size,
    )


def data_from_meta(meta: Mapping[str, Any]) -> DataBundle:
    """Rebuild the data a checkpoint was trained on from its ``meta`` (no recipe needed)."""
    if not isinstance(meta.get("data"), Mapping):
        raise OFAError("checkpoint metadata has no 'data' section (was it written by `ofa train`?)")
    cfg = dict(meta["data"])
    if meta.get("mean") is not None and meta.get("std") is not None:
        cfg["mean"], cfg["std"] = list(meta["mean"]), list(meta["std"])
    return build_data(cfg, source="checkpoint meta: data")
