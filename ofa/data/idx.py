"""MNIST-format (IDX) files on disk: Fashion-MNIST from a local copy, plain or gzipped.

torchvision reads only its own ``ROOT/FashionMNIST/raw`` layout with the files unpacked; the
Debian package ``dataset-fashion-mnist`` ships the four ``.gz`` files in one folder. This reader
takes either, so a copy made without internet works as it is.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from ofa.utils.errors import OFAError

FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """One IDX file (``.gz`` or not) as an array of its declared type and shape."""
    path = Path(path)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise OFAError(f"{path}: not an IDX file (bad magic number)")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_DTYPES[raw[2]])
    body = raw[4 + 4 * ndim :]
    if len(body) != int(np.prod(shape)) * dtype.itemsize:
        raise OFAError(f"{path}: truncated IDX file ({len(body)} bytes of data for shape {list(shape)})")
    return np.frombuffer(body, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


def find_idx_file(root: str | Path, stem: str, folder: str = "FashionMNIST") -> Path | None:
    """``stem`` or ``stem.gz`` in ``root`` or in torchvision's ``root/FOLDER/raw``; None when absent."""
    for base in (Path(root), Path(root) / folder / "raw"):
        for name in (stem, stem + ".gz"):
            if (base / name).is_file():
                return base / name
    return None


def missing_fashion_mnist(root: str | Path) -> str | None:
    """Why ``root`` cannot serve Fashion-MNIST, and how to get it; None when all four files are there."""
    missing = [stem for files in SPLIT_FILES.values() for stem in files if find_idx_file(root, stem) is None]
    if not missing:
        return None
    return (
        f"Fashion-MNIST not found in {root} (missing {', '.join(missing)}[.gz]): install it with "
        f"`apt-get install dataset-fashion-mnist` (to {FASHION_MNIST_ROOT}), or put the four files from "
        "anywhere in a folder and pass --set data.root=DIR"
    )


def load_split(root: str | Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 images N×H×W, int64 labels N) of the ``train`` or ``test`` split."""
    image_stem, label_stem = SPLIT_FILES[split]
    paths = [find_idx_file(root, stem) for stem in (image_stem, label_stem)]
    if None in paths:
        raise OFAError(missing_fashion_mnist(root) or f"{root}: {split} files missing")
    images, labels = (read_idx(p) for p in paths)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise OFAError(
            f"{paths[0]}: {len(images)} images of shape {list(images.shape[1:])} do not match "
            f"{len(labels)} labels in {paths[1]}"
        )
    return images, labels.astype(np.int64)
