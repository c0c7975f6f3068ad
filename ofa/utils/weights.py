"""safetensors files: weights plus a JSON header and no pickle, for every weight file that leaves the toolkit.

A file holds the tensors and, in the safetensors header's string metadata under ``ofa``, one JSON
object (format, space, arch, meta...), so one file is complete and nothing in it can run code when
read. safetensors is an optional extra (timm installs it too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ofa.utils.errors import OFAError
from ofa.utils.io import atomic_write

HEADER_KEY = "ofa"
MISSING = "safetensors is not installed (pip install 'ofa-toolkit[hub]' or pip install safetensors)"


def _safetensors() -> Any:
    try:
        import safetensors.torch
    except ImportError:
        raise OFAError(MISSING) from None
    return safetensors.torch


def save_safetensors(path: str | Path, tensors: Mapping[str, torch.Tensor], header: Mapping[str, Any]) -> Path:
    """Write ``tensors`` and the JSON-able ``header`` to ``path`` atomically; `OFAError` for a non-JSON header."""
    st = _safetensors()
    try:
        text = json.dumps(header)
    except (TypeError, ValueError) as exc:
        raise OFAError(f"{path}: metadata cannot be stored as JSON in a safetensors file: {exc}") from None
    # safetensors refuses views and shared storage: every tensor gets its own contiguous copy
    owned = {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
    return atomic_write(path, lambda p: st.save_file(owned, str(p), metadata={HEADER_KEY: text}))


def load_safetensors(path: str | Path, what: str = "weights file") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors and JSON header of a file written by `save_safetensors`; a bad file is one `OFAError` line."""
    path = Path(path)
    if not path.is_file():
        raise OFAError(f"{path}: {what} not found")
    st = _safetensors()
    try:
        with st.safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (safe_open is no mapping)
    except Exception as exc:  # safetensors raises SafetensorError and friends for a corrupt header
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OFAError(f"{path}: not a readable safetensors {what} (corrupted or truncated?): {reason}") from None
    try:
        header = json.loads(metadata.get(HEADER_KEY, "{}"))
    except json.JSONDecodeError as exc:
        raise OFAError(f"{path}: its '{HEADER_KEY}' metadata is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise OFAError(f"{path}: its '{HEADER_KEY}' metadata is not a JSON object")
    return tensors, header
