"""The models a latency table times: every layer config of a space, whole subnets, and an empty model.

Layers are measured exactly as they run in an exported subnet: each module is cut out of a real timm
subnet built by ``ofa.families.mbv3.subnet.build_subnet`` and exported with the same ONNX exporter settings.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from onnx import TensorProto, helper
from torch import nn

from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.layers import LayerSpec
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.subnet import build_subnet
from ofa.runtime.convert import DEFAULT_OPSET
from ofa.runtime.runtimes import Runner, make_runner


def layer_specs(space: SearchSpace, resolution: int) -> list[LayerSpec]:
    """Every distinct layer config the space runs at ``resolution`` (fixed layers, every block choice)."""
    specs = {layer.key: layer for layer in space.fixed_layers(resolution)}
    for s in range(space.num_stages):
        for j in range(space.max_depth):
            for k in space.kernels:
                for e in space.expands:
                    spec = space.block_spec(resolution, s, j, k, e)
                    specs.setdefault(spec.key, spec)
    return list(specs.values())


def input_shape(spec: LayerSpec, batch: int) -> tuple[int, int, int, int]:
    return (batch, spec.in_c, spec.in_hw, spec.in_hw)


class LayerModules:
    """timm modules for every layer config, cut out of real subnets (one per kernel/expand pair).

    Weights do not depend on the resolution, so one subnet per (kernel, expand) with every stage at
    full depth holds a module for every block slot at every resolution.
    """

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self._models: dict[tuple[int, int], nn.Module] = {}

    def _model(self, kernel: int, expand: int) -> nn.Module:
        if (kernel, expand) not in self._models:
            sp = self.space
            arch = sp.uniform_arch(sp.resolutions[0], kernel, expand, sp.max_depth)
            self._models[kernel, expand] = build_subnet(sp, arch).eval()
        return self._models[kernel, expand]

    def module(self, spec: LayerSpec, stage: int = -1, index: int = -1, expand: int = 0) -> nn.Module:
        """The module running ``spec``; blocks need their (stage, index, expand ratio)."""
        sp = self.space
        any_model = self._model(sp.kernels[0], sp.expands[0])
        if spec.kind == "stem":
            return nn.Sequential(any_model.conv_stem, any_model.bn1)
        if spec.kind == "first":
            return any_model.blocks[0]
        if spec.kind == "final_expand":
            return any_model.blocks[-1]
        if spec.kind == "head":
            m = any_model
            return nn.Sequential(m.global_pool, m.conv_head, m.norm_head, m.act2, m.flatten, m.classifier)
        return self._model(spec.kernel, expand).blocks[stage + 1][index]

    def for_resolution(self, resolution: int) -> dict[str, tuple[LayerSpec, nn.Module]]:
        """key -> (spec, module) for every distinct layer config at ``resolution``."""
        sp = self.space
        out = {layer.key: (layer, self.module(layer)) for layer in sp.fixed_layers(resolution)}
        for s in range(sp.num_stages):
            for j in range(sp.max_depth):
                for k in sp.kernels:
                    for e in sp.expands:
                        spec = sp.block_spec(resolution, s, j, k, e)
                        if spec.key not in out:
                            out[spec.key] = (spec, self.module(spec, s, j, e))
        return out


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
    space: SearchSpace, archs: Iterable[Arch], backend: str, batch: int, threads: int
) -> dict[str, Runner]:
    """Whole timm subnets (random weights) loaded on ``backend``, keyed by ``Arch.short()`` plus index."""
    runners = {}
    for i, arch in enumerate(archs):
        model = build_subnet(space, arch).eval()
        shape = (batch, space.in_channels, arch.resolution, arch.resolution)
        runners[f"{i}:{arch.short()}"] = make_runner(backend, model, shape, threads)
    return runners
