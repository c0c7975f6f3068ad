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

import dataclasses
import inspect
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torchvision.datasets as tvd
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, Dataset, Sampler, TensorDataset
from torchvision.transforms import v2

from ofa.data.idx import FASHION_MNIST_CLASSES, FASHION_MNIST_ROOT, load_split, missing_fashion_mnist
from ofa.utils.config import ConfigError, parse_section, section_to_dict
from ofa.utils.errors import OFAError

BUILTIN_NAMES = ("digits", "fashion_mnist", "synthetic", "imagefolder")
TENSOR_NAMES = ("digits", "fashion_mnist", "synthetic")  # held in memory as tensors at image_size
STATS_SAMPLES = 1000  # images used to estimate mean/std when the recipe does not give them


@dataclass(frozen=True)
class SyntheticConfig:
    """Class prototypes (smooth random patterns) plus Gaussian noise: learnable in a few steps."""

    train_size: int = 512
    test_size: int = 256
    num_classes: int = 4
    channels: int = 1
    noise: float = 0.35


@dataclass(frozen=True)
class DataConfig:
    """The recipe's ``data:`` section."""

    name: str = "digits"
    root: str | None = None
    image_size: int = 16
    batch_size: int = 64
    eval_batch_size: int = 256
    num_workers: int = 0
    val_fraction: float = 0.1
    test_fraction: float = 0.2
    train_subset: int | None = None  # seeded stratified subset of the train split (before validation)
    test_subset: int | None = None  # seeded stratified subset of the test split
    train_split: str = "train"
    test_split: str | None = "test"
    augment: Literal["none", "light", "crop_flip", "inception"] = "light"
    seed: int = 0
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)

    def to_dict(self) -> dict[str, Any]:
        return section_to_dict(self)


@dataclass
class DataBundle:
    """Train/val/test splits plus what a model and an exporter need to know about the images."""

    train: Dataset
    val: Dataset
    test: Dataset
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
def parse_data_config(value: Any, where: str = "data") -> DataConfig:
    """Validate a ``data:`` mapping (types, ranges, dataset name, data root on disk)."""
    if isinstance(value, DataConfig):
        return value
    cfg = parse_section(DataConfig, value, where)

    def fail(key: str, msg: str) -> None:
        raise ConfigError(f"{where}.{key}: {msg}")

    for key in ("image_size", "batch_size", "eval_batch_size"):
        if getattr(cfg, key) < 1:
            fail(key, f"must be positive, got {getattr(cfg, key)}")
    if cfg.num_workers < 0:
        fail("num_workers", f"must be >= 0, got {cfg.num_workers}")
    if not 0 < cfg.val_fraction < 1:
        fail("val_fraction", f"must be in (0, 1), got {cfg.val_fraction}")
    if not 0 < cfg.test_fraction < 1:
        fail("test_fraction", f"must be in (0, 1), got {cfg.test_fraction}")
    if (cfg.mean is None) != (cfg.std is None) or (cfg.mean is not None and len(cfg.mean) != len(cfg.std)):
        fail("std", "mean and std must be given together, with one value per channel")
    if cfg.std is not None and min(cfg.std) <= 0:
        fail("std", f"must be positive, got {list(cfg.std)}")
    for key in ("train_subset", "test_subset"):
        if getattr(cfg, key) is not None and getattr(cfg, key) < 2:
            fail(key, f"must be >= 2 images or null (the whole split), got {getattr(cfg, key)}")
    syn = cfg.synthetic
    for key in ("train_size", "test_size", "num_classes", "channels"):
        if getattr(syn, key) < 1:
            fail(f"synthetic.{key}", f"must be positive, got {getattr(syn, key)}")
    if cfg.name in ("digits", "synthetic"):
        return cfg
    if cfg.name == "fashion_mnist":
        root = _fashion_mnist_root(cfg.root)
        problem = missing_fashion_mnist(root)
        if problem:
            fail("root", problem)
        return dataclasses.replace(cfg, root=str(root))
    if cfg.name != "imagefolder" and _torchvision_class(cfg.name) is None:
        fail("name", f"{cfg.name!r} is not digits, synthetic, imagefolder or a torchvision dataset")
    if not cfg.root:
        fail("root", f"required for dataset {cfg.name!r} (a folder on this machine; nothing is downloaded)")
    root = Path(os.path.expanduser(cfg.root)).absolute()
    if not root.is_dir():
        fail("root", f"{root} does not exist")
    if cfg.name == "imagefolder":
        for key in ("train_split", "test_split"):
            sub = getattr(cfg, key)
            if sub is not None and not (root / sub).is_dir():
                hint = "; or null to carve it from the training images" if key == "test_split" else ""
                fail(key, f"{root / sub} does not exist (class folders go under ROOT/{sub}/{hint})")
    return dataclasses.replace(cfg, root=str(root))


def missing_dataset(data: Mapping[str, Any]) -> str | None:
    """Why the files of a raw ``data:`` section are not on this machine (one line), or None.

    For benchmarks that skip a recipe whose data is absent rather than fail on it.
    """
    if data.get("name") == "fashion_mnist":
        return missing_fashion_mnist(_fashion_mnist_root(data.get("root")))
    return None


def _fashion_mnist_root(root: str | None) -> Path:
    """The folder a recipe's Fashion-MNIST ``root`` names (the Debian package's when null)."""
    return Path(os.path.expanduser(root or FASHION_MNIST_ROOT)).absolute()


def _torchvision_class(name: str) -> type | None:
    for attr in dir(tvd):
        obj = getattr(tvd, attr)
        if attr.lower() == name.lower() and isinstance(obj, type) and issubclass(obj, tvd.VisionDataset):
            return obj
    return None


# --------------------------------------------------------------------------------------- datasets
def _sample_seed(seed: int, epoch: int, index: int) -> int:
    return hash((seed, epoch, index)) & 0x7FFF_FFFF_FFFF_FFFF


class ImageSplit(Dataset):
    """A subset of a source dataset with its transform.

    Random transforms draw from torch's RNG re-seeded per (seed, epoch, source index), inside a
    forked RNG so the caller's stream is untouched: results do not depend on worker count, batch
    position or where a run was resumed. ``set_epoch`` selects the epoch.
    """

    def __init__(
        self, source: Dataset, indices: Sequence[int], transform: Callable, seed: int = 0, random: bool = False
    ) -> None:
        self.source, self.indices, self.transform = source, np.asarray(indices, dtype=np.int64), transform
        self.seed, self.random, self.epoch = seed, random, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        index = int(self.indices[i])
        image, label = self.source[index]
        if not self.random:
            return self.transform(image), int(label)
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(_sample_seed(self.seed, self.epoch, index))
            return self.transform(image), int(label)


def _transforms(
    augment: str, size: int, mean: Sequence[float], std: Sequence[float], pil: bool
) -> tuple[Callable, Callable]:
    """(train, eval) transforms; PIL sources are converted to float tensors in [0, 1] first."""
    to_tensor = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)] if pil else []
    normalize = v2.Normalize(list(mean), list(std))
    resize = [v2.Resize((size, size), antialias=True)]
    if augment == "inception":
        train = [
            v2.RandomResizedCrop(size, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=32 / 255, saturation=0.5),
        ]
        evaluate = [v2.Resize(math.ceil(size / 0.875), antialias=True), v2.CenterCrop(size)]
    else:
        extra = {
            "none": [],
            "light": [v2.RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1))],
            "crop_flip": [v2.RandomCrop(size, padding=max(1, size // 8)), v2.RandomHorizontalFlip()],
        }[augment]
        train, evaluate = resize + extra, resize
    if pil:  # geometric ops on PIL images, then tensor conversion
        return v2.Compose([*train, *to_tensor, normalize]), v2.Compose([*evaluate, *to_tensor, normalize])
    return v2.Compose([*to_tensor, *train, normalize]), v2.Compose([*to_tensor, *evaluate, normalize])


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
        open_ = _torchvision_class(cfg.name)
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
    all_idx = _subset(all_idx, labels, cfg.train_subset, cfg.seed)
    test_idx = _subset(test_idx, labels if test_src is pool else _labels_of(test_src), cfg.test_subset, cfg.seed)
    train_idx, val_idx = _split(all_idx, labels, cfg.val_fraction, cfg.seed)
    if len(train_idx) == 0 or len(val_idx) == 0 or len(test_idx) == 0:
        raise ConfigError(f"{source}: too few images to carve train/val/test splits")
    if names is None:
        if labels is None:
            raise ConfigError(f"{source}.name: cannot tell the classes of {cfg.name!r} (no classes or targets)")
        names = [str(i) for i in range(int(labels.max()) + 1)]

    _, probe = _transforms("none", cfg.image_size, [0.0], [1.0], pil)
    first = probe(pool[int(train_idx[0])][0])
    in_channels = int(first.shape[0])
    if cfg.mean is not None:
        if len(cfg.mean) != in_channels:
            raise ConfigError(f"{source}.mean: {len(cfg.mean)} values for images with {in_channels} channels")
        mean, std = cfg.mean, cfg.std
    else:
        mean, std = _stats(pool, train_idx, probe, cfg.seed)
    train_tf, eval_tf = _transforms(cfg.augment, cfg.image_size, mean, std, pil)
    return DataBundle(
        train=ImageSplit(pool, train_idx, train_tf, cfg.seed, random=cfg.augment != "none"),
        val=ImageSplit(pool, val_idx, eval_tf),
        test=ImageSplit(test_src, test_idx, eval_tf),
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


# --------------------------------------------------------------------------------------- loaders
class ShardedBatchSampler(Sampler[list[int]]):
    """Batches of one rank, in an order fixed by (seed, epoch).

    Each global batch of ``batch_size * world_size`` consecutive images of the epoch order is cut
    into one block per rank, so ranks together see what one process with the global batch (cut
    into micro-batches) sees. ``drop_last`` drops the incomplete global batch (training: every
    rank takes the same number of steps); otherwise every image is seen exactly once (evaluation).
    """

    def __init__(
        self,
        size: int,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int,
        drop_last: bool,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world of {world_size}")
        self.size, self.batch_size, self.shuffle, self.seed = size, batch_size, shuffle, seed
        self.drop_last, self.rank, self.world_size = drop_last, rank, world_size
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """Select the epoch's order and skip its first ``start_batch`` batches (resume)."""
        self.epoch, self.start_batch = epoch, start_batch

    def _batches(self) -> list[list[int]]:
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.size)
        else:
            order = np.arange(self.size)
        glob = self.batch_size * self.world_size
        count = self.size // glob if self.drop_last else math.ceil(self.size / glob)
        out = []
        for t in range(count):
            lo = t * glob + self.rank * self.batch_size
            block = order[lo : min(lo + self.batch_size, (t + 1) * glob, self.size)]
            if len(block):
                out.append(block.tolist())
        return out

    def __iter__(self):
        yield from self._batches()[self.start_batch :]

    def __len__(self) -> int:
        return max(0, len(self._batches()) - self.start_batch)


@dataclass(frozen=True)
class LoaderOptions:
    """How this process reads a dataset: its shard of every batch, and its worker processes.

    ``persistent_workers`` keeps worker processes between passes (evaluation loaders); workers
    hold a copy of the dataset, so only use it where the augmentation epoch never changes.
    """

    rank: int = 0
    world_size: int = 1
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False


def make_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int,
    drop_last: bool = False,
    options: LoaderOptions = LoaderOptions(),
) -> DataLoader:
    """A DataLoader whose order depends only on (seed, epoch) and which holds this rank's shard.

    See `ShardedBatchSampler` for how batches are cut and `set_loader_epoch` for epochs and resume.
    """
    o = options
    sampler = ShardedBatchSampler(
        len(dataset), batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last, rank=o.rank, world_size=o.world_size
    )
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=o.num_workers,
        pin_memory=o.pin_memory,
        persistent_workers=o.persistent_workers and o.num_workers > 0,
    )


def set_loader_epoch(loader: DataLoader, epoch: int, start_batch: int = 0) -> None:
    """Epoch of both the batch order and the augmentation; skip ``start_batch`` batches."""
    loader.batch_sampler.set_epoch(epoch, start_batch)
    if hasattr(loader.dataset, "set_epoch"):
        loader.dataset.set_epoch(epoch)
