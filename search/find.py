"""Finding the subnets for one device: the supernet's space, its predictor and the device's table must
agree before a search means anything; this module checks that, searches, and writes the answer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ofa.families.family import Space
from ofa.families.registry import load_supernet
from search.evolution import RowModel, SubsetPredictor, run_search
from search.latency import LatencyTable, require_dtype
from search.predictor.model import AccuracyPredictor
from search.result import SearchResult
from search.search_config import SearchConfig


@dataclass
class Found:
    """A search's result, where it was written, and a note for the user (or None)."""

    result: SearchResult
    paths: dict[str, Path]
    note: str | None = None


def search_device(
    space: Space,
    predictor: AccuracyPredictor,
    table: LatencyTable,
    cfg: SearchConfig,
    progress: bool = False,
    what: str = "the supernet",
) -> tuple[SearchResult, str | None]:
    """Search ``space`` (a supernet's) on ``table``'s device; returns the result and a note when the table
    measured only some of the supernet's resolutions (then only those are searched).

    Raises ``OFAError`` when the predictor or the table belongs to another space or another dtype than
    ``cfg.dtype``, or a budget is unreachable.
    """
    predictor.check_space(space, what)
    check_dtypes(predictor, table, cfg.dtype)
    source, table = table.source, table.for_space(space)
    scorer: RowModel = predictor
    note = None
    if table.space.resolutions != space.resolutions:
        note = (
            f"{source} measured resolutions {list(table.space.resolutions)} of the supernet's "
            f"{list(space.resolutions)}: searching those"
        )
        scorer = SubsetPredictor(predictor, space, table.space)
    result = run_search(table.space, scorer, table, cfg, progress=progress)
    result.meta["device"] = table.describe()
    result.meta["table_noise_pct"] = table.noise_pct()  # how far the latencies searched on may be off
    result.meta["table_cpu"] = table.meta.get("cpu")
    result.meta["dtype"] = cfg.dtype
    return result, note


def check_dtypes(predictor: AccuracyPredictor, table: LatencyTable, dtype: str) -> None:
    """The table timed, and the predictor predicts, models of the search's dtype (one line naming the file)."""
    remedy = f"fit one on `ofa predictor collect --dtype {dtype}` data"
    require_dtype(predictor.source, "accuracy predictor of top-1", predictor.dtype, dtype, remedy)
    remedy = f"build one with `ofa lut build --dtype {dtype}`"
    require_dtype(table.source, "latency table measured", table.dtype, dtype, remedy)


def search_files(
    supernet: str | Path, predictor: str | Path, lut: str | Path, cfg: SearchConfig, out: str | Path | None = None
) -> Found:
    """`ofa search`: load the three files, search, and write the answer (default: ``search/`` beside the
    predictor); each arch file carries the supernet's space fingerprint."""
    space = load_supernet(supernet).space
    result, note = search_device(
        space,
        AccuracyPredictor.load(predictor),
        LatencyTable.load(lut),
        cfg,
        progress=True,
        what=f"the supernet {supernet}",
    )
    result.meta.update(supernet=str(supernet), predictor=str(predictor))
    folder = Path(out) if out else Path(predictor).parent / "search"
    return Found(result, result.save(folder, lut=str(lut), space=space), note)
