"""The ``data:`` section of a recipe, parsed and checked before any data are read."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torchvision.datasets as tvd

from ofa.data.idx import FASHION_MNIST_ROOT, missing_fashion_mnist
from ofa.utils.config import ConfigError, parse_section, section_to_dict, without_later_defaults

BUILTIN_NAMES = ("digits", "fashion_mnist", "synthetic", "imagefolder")
TENSOR_NAMES = ("digits", "fashion_mnist", "synthetic")  # held in memory as tensors at image_size


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
    val_fraction: float = 0.1  # of train_subset, when val_size is null
    val_size: int | None = None  # validation images taken from the train split outside train_subset instead
    test_fraction: float = 0.2
    train_subset: int | None = None  # seeded stratified subset of the train split (before validation)
    test_subset: int | None = None  # seeded stratified subset of the test split
    train_split: str = "train"
    test_split: str | None = "test"
    augment: Literal["none", "light", "crop_flip", "inception"] = "light"
    # BN recalibration and INT8 calibration on training images as training augments them (true, as the official
    # code recalibrates), or as evaluation transforms them (false: statistics of the images the model will see)
    calib_augment: bool = True
    seed: int = 0
    # seed of the train/validation partition alone (null: ``seed``): another partition, the test split unchanged,
    # so repeated runs can each hold out other validation images (repeated random sub-sampling validation)
    val_seed: int | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)

    def to_dict(self) -> dict[str, Any]:
        """The section as a recipe holds it, ``LATER_KEYS`` left out at their defaults."""
        return without_later_defaults(section_to_dict(self), DataConfig, LATER_KEYS)


LATER_KEYS = ("val_size", "val_seed", "calib_augment")  # DataConfig keys newer than cached runs


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
    if cfg.val_seed is not None and cfg.val_seed < 0:
        fail("val_seed", f"must be >= 0 or null (the data seed), got {cfg.val_seed}")
    if cfg.val_size is not None and cfg.val_size < 1:
        fail("val_size", f"must be a positive number of images or null, got {cfg.val_size}")
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
        root = fashion_mnist_root(cfg.root)
        problem = missing_fashion_mnist(root)
        if problem:
            fail("root", problem)
        return dataclasses.replace(cfg, root=str(root))
    if cfg.name != "imagefolder" and torchvision_class(cfg.name) is None:
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
        return missing_fashion_mnist(fashion_mnist_root(data.get("root")))
    return None


def fashion_mnist_root(root: str | None) -> Path:
    """The folder a recipe's Fashion-MNIST ``root`` names (the Debian package's when null)."""
    return Path(os.path.expanduser(root or FASHION_MNIST_ROOT)).absolute()


def torchvision_class(name: str) -> type | None:
    for attr in dir(tvd):
        obj = getattr(tvd, attr)
        if attr.lower() == name.lower() and isinstance(obj, type) and issubclass(obj, tvd.VisionDataset):
            return obj
    return None


# --------------------------------------------------------------------------------------- datasets
