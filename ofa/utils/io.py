"""Atomic writes and safe reads: a crash never leaves a half-written file behind."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from ofa.utils.errors import OFAError

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` then rename the temp file over ``path`` (same folder, same disk)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda p: p.write_text(text))


def write_json(path: str | Path, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_yaml(path: str | Path, obj: Any) -> Path:
    return write_text(path, yaml.safe_dump(obj, sort_keys=False))


def save_torch(path: str | Path, obj: dict) -> Path:
    return atomic_write(path, lambda p: torch.save(obj, p))


def load_torch(path: str | Path, what: str = "checkpoint") -> dict:
    """Load a tensors-and-plain-values file; a missing, truncated or foreign file is an OFAError."""
    path = Path(path)
    if not path.is_file():
        raise OFAError(f"{path}: {what} not found")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for truncated/corrupt zips
        raise OFAError(f"{path}: not a readable {what}: {load_failure(exc)}") from None
    if not isinstance(obj, dict):
        raise OFAError(f"{path}: not a {what} (expected a mapping, got {type(obj).__name__})")
    return obj


def load_failure(exc: Exception) -> str:
    """Why torch did not load a file, in one line. A weights-only refusal names what it refused, where torch's
    own first line advises loading the file again with ``weights_only=False``, which runs whatever code the
    file holds (no file this package writes needs it)."""
    text = str(exc).strip()
    _, refusal, refused = text.partition("WeightsUnpickler error:")
    if refusal:
        what = (refused.strip().splitlines() or ["?"])[0].split(" was not an allowed global")[0].strip()
        return f"it holds what a weights-only load refuses ({what}): written by other code, or corrupted"
    first = text.splitlines()[0].split("  (Could this error message be improved?")[0].strip() if text else ""
    return f"corrupted or truncated? {first or type(exc).__name__}"


def read_text(path: str | Path, what: str = "text file") -> str:
    """A text file's contents; missing or binary is one OFAError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise OFAError(f"{path}: {what} not found")
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise OFAError(f"{path}: not a {what} (binary content)") from None


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    text = read_text(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise OFAError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OFAError(f"{path}: invalid JSON: {exc}") from None


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes: identifies a checkpoint or table in metadata and stage keys."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def utc_timestamp() -> str:
    """Now, as the ``date`` of a record a file keeps (UTC, to the second)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
