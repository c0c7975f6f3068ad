"""The models a latency table times: every layer config of a space, whole subnets, and an empty model.

The layer configs are those of the family's cost terms (``ofa.families.genes.CostTerm``); each is timed
as the module the family's ``layer_module`` gives for it, which for mbv3 is cut out of a real timm
subnet, exported with the same ONNX exporter settings as whole subnets. In an INT8 table each layer model
and whole subnet is quantized on its own (`ofa.runtime.quantize`), so a layer's input and output pass
the Q/DQ pair that sits at its boundaries inside a quantized subnet; the empty model stays float.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import torch
from onnx import TensorProto, helper
from torch import nn

from ofa.families.family import Arch, Space
from ofa.families.registry import family_of, layout_of
from ofa.runtime.convert import DEFAULT_OPSET
from ofa.runtime.runtimes import Runner, make_runner


def layer_specs(space: Space, resolution: int) -> list[Any]:
    """Every distinct layer config the space runs at ``resolution``: each cost term at every choice of its columns."""
    layout = layout_of(space)
    specs: dict[str, Any] = {}
    for term in layout.terms:
        choices = [[resolution] if c == layout.resolution else layout.choices[c] for c in term.columns]
        for values in itertools.product(*choices):
            for spec in term.layers(*values):
                specs.setdefault(spec.key, spec)
    return list(specs.values())


def input_shape(spec: Any, batch: int) -> tuple[int, int, int, int]:
    return (batch, spec.in_c, spec.in_hw, spec.in_hw)


class LayerModules:
    """The module a table times for each layer config of a space (the family's ``layer_module``)."""

    def __init__(self, space: Space) -> None:
        self.space, self.layer_module = space, family_of(space).layer_module

    def for_resolution(self, resolution: int) -> dict[str, tuple[Any, nn.Module]]:
        """key -> (spec, module) for every distinct layer config at ``resolution``."""
        return {spec.key: (spec, self.layer_module(self.space, spec)) for spec in layer_specs(self.space, resolution)}


def empty_onnx(batch: int = 1) -> bytes:
    """An Identity model: its latency is the fixed per-call cost every measured model also pays."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 1])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 1])
    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["output"])], "empty", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", DEFAULT_OPSET)])
    model.ir_version = 8
    return model.SerializeToString()


class EmptyModel(nn.Module):
    """The empty model for runtimes that convert torch modules (ExecuTorch): one trivial op, as Identity."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.0


def empty_runner(backend: str, batch: int, threads: int) -> Runner:
    """The empty model on ``backend`` (onnxruntime, OpenVINO, ExecuTorch): the per-call overhead of the runtime."""
    return make_runner(backend, EmptyModel(), (batch, 1), threads, onnx_model=empty_onnx(batch))


def subnet_runners(
    space: Space, archs: Iterable[Arch], backend: str, batch: int, threads: int, dtype: str = "float32"
) -> dict[str, Runner]:
    """Whole timm subnets (random weights) loaded on ``backend`` in ``dtype`` (INT8: each quantized whole, as it
    ships), keyed by ``Arch.short()`` plus index."""
    runners = {}
    build = family_of(space).build_subnet
    for i, arch in enumerate(archs):
        model = build(space, arch).eval()
        shape = (batch, space.in_channels, arch.resolution, arch.resolution)
        runners[f"{i}:{arch.short()}"] = make_runner(backend, model, shape, threads, dtype=dtype)
    return runners
