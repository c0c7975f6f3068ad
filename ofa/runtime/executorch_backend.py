"""ExecuTorch with the XNNPACK delegate: ``.pte`` programs from torch.export, run by ExecuTorch's own runtime.

The program is what a phone app loads: ``torch.export`` → XNNPACK partitioner → ``to_executorch``, run
here by ``executorch.runtime`` (the C++ runtime behind Python bindings). ExecuTorch is an optional extra,
imported inside the functions. Metadata rides in the program as a constant method (``ofa_metadata``, a
JSON string), where ONNX files keep ``ofa.*`` props.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ofa.utils.errors import OFAError

MISSING = "ExecuTorch is not installed (pip install 'ofa-toolkit[executorch]' or pip install executorch)"
META_METHOD = "ofa_metadata"


def _require() -> Any:
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)  # its import re-registers an enum: a W line
    try:
        import executorch
        from executorch import runtime
    except ImportError:
        raise OFAError(MISSING) from None
    return executorch, runtime


def version() -> str:
    _require()
    return importlib.metadata.version("executorch")


def to_pte(module: nn.Module, input_shape: Sequence[int], metadata: Mapping[str, str] | None = None) -> bytes:
    """``module`` at a fixed input shape as a ``.pte`` program delegated to XNNPACK."""
    _require()
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    constants = {META_METHOD: json.dumps(dict(metadata), sort_keys=True)} if metadata else None
    with torch.no_grad():
        exported = torch.export.export(module.eval(), (torch.zeros(tuple(input_shape)),))
    program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()], constant_methods=constants)
    return bytes(program.to_executorch().buffer)


def _program(pte: bytes | Path) -> Any:
    _, runtime = _require()
    source = pte if isinstance(pte, bytes) else str(pte)
    try:
        return runtime.Runtime.get().load_program(source, verification=runtime.Verification.Minimal)
    except Exception as exc:  # the runtime raises its own types for unreadable programs
        raise OFAError(f"ExecuTorch cannot load the program: {str(exc).splitlines()[0]}") from None


def read_metadata(pte: bytes | Path) -> dict[str, str]:
    """The metadata a program carries (its ``ofa_metadata`` constant method), {} without one."""
    program = _program(pte)
    if META_METHOD not in program.method_names:
        return {}
    return json.loads(program.load_method(META_METHOD).execute([])[0])


def load_infer(pte: bytes | Path, threads: int) -> Callable[[np.ndarray], np.ndarray]:
    """The program's ``forward`` on an XNNPACK thread pool of ``threads``: a function from input to output."""
    from executorch.extension.pybindings.portable_lib import _threadpool_get_thread_count, _unsafe_reset_threadpool

    # The pool is global to the process, and a reset frees the pool that methods loaded before it use: it is
    # reset only before loading, so one process times one thread count (a table's runners all share one).
    if _threadpool_get_thread_count() != threads:
        _unsafe_reset_threadpool(threads)
    program = _program(pte)  # the method reads the program's memory: the closure keeps both alive
    method = program.load_method("forward")

    def infer(x: np.ndarray, _keep: Any = (pte, program)) -> np.ndarray:
        return method.execute([torch.from_numpy(x)])[0].numpy()

    return infer
