"""Per-device latency lookup tables: load, validate, save, and predict whole subnets.

A table maps every layer config of a space (its layer spec's ``key``) to its measured latency net of the
per-call overhead; a subnet's latency is the per-network overhead plus the sum of its layers'
entries. Isolated layers pay costs a whole network pays fewer times (onnxruntime converts each
isolated conv's input and output to its blocked layout), so the sum is corrected by an affine map
fitted per resolution on whole subnets measured next to the layers (``meta.correction``).
``meta.protocol`` and ``meta.clock`` say what the figures are (``ofa.lut.timing``; by default the
wall-clock latency of one model running on its own, warm, as a user measures it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ofa.families.family import Arch, Space
from ofa.families.registry import arch_from_dict, family_names, family_of, get_family, space_from_dict
from ofa.utils.errors import OFAError, SpaceError
from ofa.utils.io import atomic_write, load_torch, read_json, read_yaml
from search.dense import DenseCost

TABLE_FORMAT = "ofa-latency-table"
REQUIRED_META = ("backend", "threads", "batch", "overhead_ms", "space", "space_fingerprint", "protocol")
DTYPES = ("float32", "int8")  # what a timed, packed or searched model computes in (search sits left of runtime)


def check_known_dtype(dtype: str, what: str) -> None:
    """Refuse a dtype no table, predictor or search knows, with one line naming ``what`` (field / flag)."""
    if dtype not in DTYPES:
        raise OFAError(f"{what}: unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")


def require_dtype(source: str, kind: str, made_in: str, dtype: str, remedy: str) -> None:
    """One line when a table or predictor (``kind``, in file ``source``) is of another dtype than the search's:
    INT8 speeds layers unevenly and costs subnets unevenly, so float32 figures misrank INT8 subnets."""
    if made_in != dtype:
        raise OFAError(f"{source}: {kind} in {made_in}, but the search is in {dtype} (dtype / --dtype); {remedy}")


class LatencyTable:
    """A measured table for one device, runtime and space.

    ``space`` defaults to the space stored in ``meta``; pass another space (e.g. a supernet's, restricted
    to the table's resolutions) to predict for it: every layer it can run must have an entry.
    """

    def __init__(
        self,
        meta: Mapping[str, Any],
        entries: Mapping[str, Any],
        space: Space | None = None,
        source: str = "latency table",
    ) -> None:
        self.source = source
        self.meta = dict(meta)
        self.table_space = _space_from_meta(self.meta, source)
        self.entries = _check_entries(entries, family_of(self.table_space).layer_type, source)
        self.space = space or self.table_space
        self.overhead_ms = _number(self.meta["overhead_ms"], f"{source}: meta.overhead_ms")
        self._dense = self._build_dense(corrected=True)

    # ----------------------------------------------------------------- files
    @classmethod
    def load(cls, path: str | Path, space: Space | None = None) -> LatencyTable:
        path = Path(path)
        doc = read_yaml(path, "latency table")
        if not isinstance(doc, Mapping) or "meta" not in doc or "entries" not in doc:
            raise OFAError(f"{path}: not a latency table (expected top-level 'meta' and 'entries')")
        if not isinstance(doc["meta"], Mapping):
            raise OFAError(f"{path}: not a latency table ('meta' must be a mapping, got {type(doc['meta']).__name__})")
        if doc["meta"].get("complete") is False:
            done = doc["meta"].get("resolutions_done", [])
            raise OFAError(
                f"{path}: unfinished table (resolutions done: {done}); rerun the command in meta.command to resume it"
            )
        return cls(doc["meta"], doc["entries"], space, str(path))

    def save(self, path: str | Path) -> Path:
        return save_table(path, self.meta, self.entries)

    def bind(self, space: Space) -> LatencyTable:
        """The same measurements predicting for ``space``; a layer it runs without an entry is an error."""
        return LatencyTable(self.meta, self.entries, space, self.source)

    def for_space(self, space: Space) -> LatencyTable:
        """Bind to ``space`` restricted to the resolutions this table measured (e.g. a supernet's space)."""
        common = tuple(r for r in space.resolutions if r in self.resolutions)
        if not common:
            raise OFAError(
                f"{self.source}: measured at resolutions {list(self.resolutions)}, none of which is in "
                f"the space's {list(space.resolutions)}"
            )
        return self.bind(replace(space, resolutions=common))

    # ----------------------------------------------------------------- lookups
    @property
    def resolutions(self) -> tuple[int, ...]:
        return self.table_space.resolutions

    @property
    def dtype(self) -> str:
        """What the timed models computed in: ``float32``, or ``int8`` (quantized; ``meta.int8`` says how), so a
        search can refuse a table of another dtype than its models'. Tables that name none are float32."""
        return str(self.meta.get("dtype") or "float32")

    def entry_ms(self, layer: Any) -> float:
        """Measured latency of one layer config; a missing key is an error naming it."""
        entry = self.entries.get(layer.key)
        if entry is None:
            raise OFAError(
                f"{self.source}: no entry for layer {layer.key} (the table covers resolutions "
                f"{list(self.resolutions)} of space {self.meta['space_fingerprint']}; "
                f"build a table for this space with `ofa lut build`)"
            )
        return float(entry["mean_ms"])

    def correction(self, resolution: int) -> tuple[float, float]:
        """(scale, offset) mapping the raw sum at ``resolution`` to the predicted whole-network ms."""
        corr = self.meta.get("correction") or {}
        per_res = corr.get("per_resolution") or {}
        if not per_res:
            return 1.0, 0.0
        fit = per_res.get(resolution)
        if fit is None:
            raise OFAError(
                f"{self.source}: meta.correction has no fit for resolution {resolution} (fitted: {sorted(per_res)})"
            )
        return float(fit["scale"]), float(fit["offset"])

    def _build_dense(self, corrected: bool) -> DenseCost:
        raw = DenseCost.from_layer_cost(self.space, self.entry_ms, self.overhead_ms)
        if not corrected:
            return raw
        scale, offset = np.array([self.correction(r) for r in self.space.resolutions]).T
        return raw.affine(scale, offset)

    def dense(self, corrected: bool = True) -> DenseCost:
        """The table as dense arrays over the space (see ``search.dense.DenseCost``)."""
        return self._dense if corrected else self._build_dense(corrected=False)

    # ----------------------------------------------------------------- predictions
    def predict(self, arch: Arch) -> float:
        """Predicted latency (ms) of one subnet."""
        try:
            return self._dense.predict(arch)
        except SpaceError as exc:
            raise OFAError(f"{self.source}: cannot predict this arch: {exc}") from None

    def predict_batch(self, rows: np.ndarray) -> np.ndarray:
        """Predicted latencies (ms) of a population of integer gene rows (the family's gene layout)."""
        return self._dense.predict_batch(rows)

    def predict_raw(self, arch: Arch) -> float:
        """Overhead plus sum of entries, without the whole-network correction."""
        return self.dense(corrected=False).predict(arch)

    def calibration_archs(self) -> list[Arch]:
        """Subnets used to fit the correction; ``ofa lut check`` never judges the table on them."""
        per_res = (self.meta.get("correction") or {}).get("per_resolution") or {}
        return [
            arch_from_dict(self.table_space, p["arch"], f"{self.source}: meta.correction")
            for fit in per_res.values()
            for p in fit.get("points", [])
        ]

    def probes(self, resolution: int) -> list[tuple[Arch, float]]:
        """Drift probes (subnet, ms when the table was built): re-timed by a check to see the machine drift."""
        points = (self.meta.get("probes") or {}).get(resolution) or []
        return [
            (arch_from_dict(self.table_space, p["arch"], f"{self.source}: meta.probes"), float(p["measured_ms"]))
            for p in points
        ]

    def noise_pct(self) -> float | None:
        """How sure the table's figures are: the widest per-resolution noise its build recorded (% of the
        figures; `ofa.lut.timing.NOISE_CRITERION`), None for a table that records none."""
        per = ((self.meta.get("noise") or {}).get("per_resolution")) or {}
        values = [float(rec["noise_pct"]) for r, rec in per.items() if int(r) in self.resolutions]
        return max(values) if values else None

    def describe(self) -> str:
        m = self.meta
        protocol = m["protocol"].get("kind", "interleaved-rounds") if isinstance(m["protocol"], Mapping) else "?"
        return (
            f"{m.get('device', '?')} / {m['backend']} {m.get('runtime_version', '')} / {m['threads']} thread(s) "
            f"/ batch {m['batch']} / {len(self.entries)} entries / resolutions {list(self.resolutions)} "
            f"/ {protocol} protocol, {m.get('clock', '?')} clock"
            + (f" / {self.dtype}" if self.dtype != "float32" else "")
        )


# --------------------------------------------------------------------------------- helpers
def space_from_arg(arg: str) -> Space:
    """A space from a family's preset name (``mbv3``), a recipe or space file (YAML/JSON), a supernet/checkpoint,
    or a table."""
    presets = {name: make for f in family_names() for name, make in get_family(f).presets.items()}
    if arg in presets:
        return presets[arg]()
    path = Path(arg)
    if not path.is_file():
        raise OFAError(
            f"{arg}: space not found (give a preset ({', '.join(presets)}), a space file, a checkpoint or a table)"
        )
    if path.suffix in (".pt", ".pth"):
        obj = load_torch(path, "checkpoint")
        if "space" not in obj:
            raise OFAError(f"{path}: checkpoint has no 'space'")
        return space_from_dict(obj["space"], f"{path}:space")
    doc = read_json(path, "space file") if path.suffix == ".json" else read_yaml(path, "space file")
    if isinstance(doc, Mapping) and isinstance(doc.get("meta"), Mapping) and "entries" in doc:
        return _space_from_meta(doc["meta"], str(path))
    if isinstance(doc, Mapping) and "space" in doc:
        return space_from_dict(doc["space"], f"{path}:space")
    return space_from_dict(doc, str(path))


def save_table(path: str | Path, meta: Mapping[str, Any], entries: Mapping[str, Any]) -> Path:
    """Write a table atomically; leaf mappings and lists in flow style so each entry is one line."""
    doc = {"format": TABLE_FORMAT, "meta": dict(meta), "entries": dict(entries)}
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=1_000_000)
    return atomic_write(path, lambda p: p.write_text(text))


def _number(value: Any, where: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not np.isfinite(value):
        raise OFAError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _check_entries(entries: Any, layer_type: type, source: str) -> dict[str, dict[str, Any]]:
    if not isinstance(entries, Mapping):
        raise OFAError(f"{source}: entries must be a mapping from layer key to {{mean_ms, std_ms, count}}")
    out = {}
    for key, entry in entries.items():
        where = f"{source}: entries[{key!r}]"
        if not isinstance(entry, Mapping) or "mean_ms" not in entry:
            raise OFAError(f"{where}: expected a mapping with mean_ms, std_ms, count")
        if _number(entry["mean_ms"], f"{where}.mean_ms") < 0:
            raise OFAError(f"{where}.mean_ms: must not be negative, got {entry['mean_ms']}")
        try:
            layer_type.from_key(str(key))
        except (KeyError, ValueError):
            raise OFAError(f"{where}: not a layer key (expected e.g. mbconv:in=56x56x24:out=24:k=3:...)") from None
        out[str(key)] = dict(entry)
    return out


def _space_from_meta(meta: Mapping[str, Any], source: str) -> Space:
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise OFAError(f"{source}: meta.{missing[0]} is missing")
    space = space_from_dict(meta["space"], f"{source}: meta.space")
    if space.fingerprint() != meta["space_fingerprint"]:
        raise OFAError(
            f"{source}: meta.space_fingerprint {meta['space_fingerprint']} does not match meta.space "
            f"({space.fingerprint()}); the table was edited by hand"
        )
    return space
