"""The JSON file of an arch, the same for every family: what `ofa search` writes and `ofa export` reads.

A family's arch dataclass inherits ``ArchFile`` and defines ``to_dict`` / ``from_dict(d, source)`` and an
``extra`` field; reading, writing and merging extras are then one implementation for all families.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from ofa.utils.errors import SpaceError
from ofa.utils.io import read_text, write_json

A = TypeVar("A", bound="ArchFile")


class ArchFile:
    """Mixin: JSON text and files of an arch dataclass with ``to_dict``, ``from_dict`` and ``extra``."""

    extra: dict[str, Any]  # the inheriting dataclass's field; its to_dict / from_dict are the format

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls: type[A], text: str, source: str = "arch") -> A:
        try:
            return cls.from_dict(json.loads(text), source)  # type: ignore[attr-defined]
        except json.JSONDecodeError as exc:
            raise SpaceError(f"{source}: invalid JSON: {exc}") from None

    @classmethod
    def load(cls: type[A], path: str | Path) -> A:
        """Read an arch file; raises ``SpaceError`` (one line naming the file) when missing or malformed."""
        path = Path(path)
        if not path.is_file():
            raise SpaceError(f"{path}: arch file not found")
        return cls.from_json(read_text(path, "arch file"), str(path))

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    def with_extra(self: A, extra: Mapping[str, Any]) -> A:
        """A copy with ``extra`` merged into its extras (JSON-serialisable values)."""
        return replace(self, extra={**self.extra, **extra})  # type: ignore[type-var]
