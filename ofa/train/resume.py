"""What a run folder may be continued with: no second run over a first, no resume with another recipe.

A checkpoint stores the resolved recipe it was trained with (``meta.recipe``) and its number of
processes (``world_size``). Continuing with a changed recipe would silently mix two runs (a
checkpoint past a shortened phase even skips the phase starts that follow it), so only the keys
in `RESUMABLE`, which do not change what is trained, may differ; every other change, and another
world size, is refused in one line naming the first differing key.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ofa.train.checkpoint import CheckpointStore
from ofa.train.recipe import Recipe
from ofa.utils.config import Difference, differences
from ofa.utils.errors import OFAError

# Recipe keys a resumed run may change ("x.*": x itself and every key under x). Logging keys belong here.
RESUMABLE = (
    "eval.*",
    "checkpoint.keep",
    "checkpoint.safetensors",
    "data.num_workers",
    "data.root",
    "logging.*",
    "pipeline.*",
)


def prepare_run_folder(out: str | Path, resume: bool, product: str = "supernet.pt", run: str = "training run") -> bool:
    """Create the run folder ``out`` if needed; returns whether it already holds a run to continue.

    Raises `OFAError` when ``out`` holds a ``run`` (checkpoints or the ``product`` file it ends
    with) and ``resume`` is False, or when it cannot be created (a file in the way, no permission).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OFAError(f"{out}: is a file, not a run folder; choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OFAError(f"{out}: cannot create the run folder ({exc.strerror or exc}); choose another --out") from None
    held = bool(CheckpointStore(out / "checkpoints").paths()) or (out / product).exists()
    if held and not resume:
        raise OFAError(f"{out}: already holds a {run}; pass --resume to continue it or choose another --out")
    return held


def check_same_space(state: Mapping[str, Any], recipe: Recipe) -> None:
    """The checkpoint's weights fit ``recipe``'s supernet (its search space is the same)."""
    if state["space"] != recipe.space.to_dict():
        raise OFAError(
            f"the checkpoint's search space differs from that of {recipe.source}; use the recipe the run started with"
        )


def check_resume(state: Mapping[str, Any], recipe: Recipe, world_size: int, checkpoint: str | Path) -> list[str]:
    """Refuse to continue ``checkpoint`` with another recipe or world size; returns the lines to log.

    Allowed changes (`RESUMABLE`) are reported, ``data.root`` as a moved copy of the data. A
    checkpoint that records no recipe or world size (an older one) resumes with one warning line.
    """
    check_same_space(state, recipe)
    stored, stored_world = state["meta"].get("recipe"), state.get("world_size")
    notes = []
    if stored is None or stored_world is None:
        missing = " and ".join(w for w, v in (("recipe", stored), ("world size", stored_world)) if v is None)
        notes.append(f"warning: {checkpoint} records no {missing}: resuming without checking that it is unchanged")
    if stored_world is not None and stored_world != world_size:
        raise OFAError(
            f"{checkpoint} was trained on {stored_world} process(es), this run has {world_size}; resume "
            "with the same number of processes (torchrun --nproc_per_node) or choose another --out"
        )
    if stored is None:
        return notes
    changed = differences(stored, recipe.to_dict())
    refused = [d for d in changed if not resumable(d.key)]
    if refused:
        d = refused[0]
        raise OFAError(
            f"{recipe.source}: {d.key} is {_show(d.new)}, but {checkpoint} was trained with "
            f"{_show(d.old)}; a resumed run keeps its recipe (only {', '.join(RESUMABLE)} may change): "
            "undo the change or choose another --out"
        )
    for d in changed:
        if d.key == "data.root":
            notes.append(
                f"data.root: {d.old} -> {d.new}: resuming on a moved copy of the data (it must hold the same images)"
            )
    others = [d for d in changed if d.key != "data.root"]
    if others:
        notes.append(
            "resuming with "
            + ", ".join(_change(d) for d in others)
            + " (recipe.yaml keeps the recipe the run started with)"
        )
    return notes


def resumable(key: str) -> bool:
    """Whether a resumed run may change recipe key ``key`` (``eval.every``, ``phases[1].lr``...)."""
    return any(key == p or (p.endswith(".*") and (key == p[:-2] or key.startswith(p[:-1]))) for p in RESUMABLE)


def _show(value: Any) -> str:
    """A value for a one-line message: a list of named entries (phases) by their names."""
    if isinstance(value, list | tuple) and value and all(isinstance(v, Mapping) and "name" in v for v in value):
        return f"{len(value)} entries {[v['name'] for v in value]}"
    return repr(value)


def _change(d: Difference) -> str:
    return f"{d.key} {_show(d.old)} -> {_show(d.new)}"
