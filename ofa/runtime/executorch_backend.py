"""ExecuTorch with the XNNPACK delegate: ``.pte`` programs from torch.export, run by ExecuTorch's own runtime.

The program is what a phone app loads: ``torch.export`` → XNNPACK partitioner → ``to_executorch``, run
here by ``executorch.runtime`` (the C++ runtime behind Python bindings). ExecuTorch is an optional extra,
imported inside the functions. Metadata rides in the program as a constant method (``ofa_metadata``, a
JSON string), where ONNX files keep ``ofa.*`` props. INT8 programs are quantized by XNNPACK's own quantizer
(PT2E, `quantize`), and carry the op types they still compute in float in that metadata (`FLOAT_OPS_KEY`).
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

INT8_RECORD = {  # how `quantize` quantizes, as a table's meta records it
    "scheme": "XNNPACK quantizer (PT2E): symmetric per-channel int8 weights, int8 activations, static ranges",
}
FLOAT_OPS_KEY = "int8_float_ops"  # metadata key: comma-separated op types an INT8 program computes in float
MOVES_DATA = {"flatten", "view", "reshape", "permute", "squeeze", "unsqueeze", "dropout", "clone", "_to_copy"}
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


def quantize(module: nn.Module, batches: Sequence[np.ndarray]) -> torch.fx.GraphModule:
    """``module`` quantized by XNNPACK's quantizer (PT2E: exported, observed on ``batches``, converted)."""
    _require()
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    if not batches:
        raise OFAError("INT8 quantization needs calibration images (none were given)")
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    # Its conv+BN patterns are QAT's: prepare_pt2e folds every BN into its conv before annotating, yet the
    # quantizer traces each pattern for a static config too (12 torch.export calls, over half an INT8
    # export's time). Left out, the quantized program is the same, bit for bit (tests/test_lut_int8_edge.py).
    quantizer.SUPPORTED_PATTERNS = [p for p in XNNPACKQuantizer.SUPPORTED_PATTERNS if not p.is_qat]
    with torch.no_grad():
        exported = torch.export.export(module.eval(), (torch.from_numpy(batches[0]),)).module()
        prepared = prepare_pt2e(exported, quantizer)
        for batch in batches:
            prepared(torch.from_numpy(batch))
        return convert_pt2e(prepared)


def float_ops(quantized: torch.fx.GraphModule) -> tuple[str, ...]:
    """The op types of a `quantize`d graph that compute in float: an op whose output is not quantized, unless it
    opens a fused pattern (a convolution whose one user, its activation, has a quantized output)."""

    def quantized_output(node: Any) -> bool:
        return any("quantized_decomposed.quantize" in str(u.target) for u in node.users)

    ops = set()
    for node in quantized.graph.nodes:
        if node.op != "call_function" or "quantized_decomposed" in str(node.target):
            continue
        target = str(node.target)
        name = (target.split(".")[1] if target.startswith("aten.") else target).rstrip("_")
        fused = len(node.users) == 1 and quantized_output(next(iter(node.users)))
        if not (quantized_output(node) or fused) and name not in MOVES_DATA and "getitem" not in name:
            ops.add(name)
    return tuple(sorted(ops))


def to_pte(
    module: nn.Module,
    input_shape: Sequence[int],
    metadata: Mapping[str, str] | None = None,
    int8_batches: Sequence[np.ndarray] | None = None,
) -> bytes:
    """``module`` at a fixed input shape as a ``.pte`` program delegated to XNNPACK; with ``int8_batches``,
    quantized on them first (`quantize`), its float ops in the metadata (`FLOAT_OPS_KEY`)."""
    _require()
    if int8_batches is not None:
        module = quantize(module, int8_batches)
        metadata = {**(metadata or {}), FLOAT_OPS_KEY: ",".join(float_ops(module))}
    else:
        module = module.eval()
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    constants = {META_METHOD: json.dumps(dict(metadata), sort_keys=True)} if metadata else None
    with torch.no_grad():
        exported = torch.export.export(module, (torch.zeros(tuple(input_shape)),))
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


def program_float_ops(pte: bytes | Path) -> tuple[str, ...]:
    """The op types an INT8 program computes in float, as `to_pte` recorded them."""
    return tuple(op for op in read_metadata(pte).get(FLOAT_OPS_KEY, "").split(",") if op)


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
