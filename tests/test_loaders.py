"""Every loader gives one line naming the file for a file of the wrong kind, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.families.subnet_file import SUBNET_FORMAT, load_subnet
from ofa.families.supernet_file import CHECKPOINT_FORMAT, SUPERNET_FORMAT
from ofa.train.checkpoint import load_checkpoint
from ofa.utils.errors import OFAError
from search.latency import LatencyTable
from search.predictor.accuracy_file import load_accuracy
from search.predictor.model import PREDICTOR_FORMAT, AccuracyPredictor

LOADERS = {
    "table": LatencyTable.load,
    "predictor": AccuracyPredictor.load,
    "subnet": load_subnet,
    "supernet": OFAMobileNetV3.load,
    "checkpoint": load_checkpoint,
    "arch": Arch.load,
    "accuracy": load_accuracy,
}
FORMATS = (SUBNET_FORMAT, SUPERNET_FORMAT, CHECKPOINT_FORMAT, PREDICTOR_FORMAT)


def wrong_files(folder: Path) -> list[Path]:
    """Files of every wrong kind: junk, empty, other formats' data, the right format with no space."""
    files = {
        "junk.pt": b"\x80\x03not a zip at all\xff",
        "empty.json": b"",
        "list.json": json.dumps([1, 2, 3]).encode(),
        "scalar.yaml": b"42\n",
        "meta-int.yaml": yaml.safe_dump({"meta": 3, "entries": {}}).encode(),
        "entries-list.yaml": yaml.safe_dump({"meta": {"format": "ofa-latency-table"}, "entries": [1]}).encode(),
        "arch-like.json": json.dumps({"resolution": "big", "depths": [1]}).encode(),
    }
    paths = []
    for name, data in files.items():
        (folder / name).write_bytes(data)
        paths.append(folder / name)
    for fmt in FORMATS:
        path = folder / f"{fmt}-bare.pt"
        torch.save({"format": fmt}, path)
        paths.append(path)
    torch.save([1, 2], folder / "tensor-list.pt")
    paths.append(folder / "tensor-list.pt")
    return paths


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_loader_rejects_files_of_the_wrong_kind_in_one_line(kind, tmp_path):
    for path in wrong_files(tmp_path):
        with pytest.raises(OFAError) as info:
            LOADERS[kind](path)
        message = str(info.value)
        assert "\n" not in message and str(path) in message, (kind, path.name, message)
