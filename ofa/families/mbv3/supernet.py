"""The elastic MobileNetV3 supernet: one set of weights, any subnet of the space active."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.elastic import ElasticMBConv, kernel_matrices
from ofa.families.mbv3.encoding import sample_arch
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.subnet import build_subnet, timm_args, timm_model
from ofa.families.supernet_file import read_record, write_supernet
from ofa.utils.errors import OFAError


class OFAMobileNetV3(nn.Module):
    """Supernet of an elastic MobileNetV3 space.

    The fixed parts (stem, first block, final expand, head) are the very timm modules of the
    largest subnet; the elastic stages are `ElasticMBConv` blocks whose names mirror timm's, so
    ``extract`` is a state-dict copy.
    """

    def __init__(self, space: SearchSpace, num_classes: int | None = None) -> None:
        super().__init__()
        if num_classes is not None and num_classes != space.num_classes:
            space = SearchSpace.from_dict({**space.to_dict(), "num_classes": num_classes})
        self.space = space
        skeleton = build_subnet(space, space.max_arch())
        self.conv_stem, self.bn1 = skeleton.conv_stem, skeleton.bn1
        stages: list[nn.Module] = [skeleton.blocks[0]]
        for s, stage in enumerate(space.stages):
            blocks = []
            for j in range(space.max_depth):
                in_c, out_c, stride = space.block_io(s, j)
                blocks.append(ElasticMBConv(in_c, out_c, stride, space.kernels, space.expands, stage.se, stage.act))
            stages.append(nn.ModuleList(blocks))
        stages.append(skeleton.blocks[-1])
        self.blocks = nn.ModuleList(stages)
        self.global_pool, self.conv_head, self.act2 = skeleton.global_pool, skeleton.conv_head, skeleton.act2
        self.flatten, self.classifier = skeleton.flatten, skeleton.classifier
        self.dropout = nn.Dropout(space.dropout)
        self.active_arch = space.max_arch()
        self.set_active(self.active_arch)

    # ----------------------------------------------------------------- elastic control
    def set_active(self, arch: Arch) -> Arch:
        """Activate ``arch`` (resolution is the caller's: feed inputs of ``arch.resolution``)."""
        return self._activate(self.space.validate(arch))

    def _activate(self, arch: Arch) -> Arch:
        """`set_active` of an arch already validated against this space."""
        d = self.space.max_depth
        for s in range(self.space.num_stages):
            for j, block in enumerate(self.blocks[s + 1]):
                block.set_active(arch.kernels[s * d + j], arch.expands[s * d + j])
        self.active_arch = arch
        return arch

    def sample_active(
        self,
        rng: np.random.Generator | int | None = None,
        *,
        kernels: Sequence[int] | None = None,
        expands: Sequence[int] | None = None,
        depths: Sequence[int] | None = None,
        resolutions: Sequence[int] | None = None,
    ) -> Arch:
        """Activate a random subnet (``encoding.sample_arch``), optionally restricted to subsets of the choices."""
        return self.set_active(
            sample_arch(self.space, rng, kernels=kernels, expands=expands, depths=depths, resolutions=resolutions)
        )

    def _active_slots(self) -> list[tuple[int, int]]:
        """(index in ``self.blocks``, index in its stage) of each elastic block the active subnet runs."""
        return [(s + 1, j) for s, depth in enumerate(self.active_arch.depths) for j in range(depth)]

    def active_blocks(self) -> list[ElasticMBConv]:
        """The elastic blocks the active subnet runs, in order."""
        return [self.blocks[i][j] for i, j in self._active_slots()]

    def _active_kernel_matrices(self, blocks: Sequence[ElasticMBConv]) -> list[torch.Tensor | None]:
        """The blocks' depthwise kernel matrices, built in one batched chain (`kernel_matrices`)."""
        return kernel_matrices([block.conv_dw for block in blocks], [block.active_kernel for block in blocks])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        blocks = self.active_blocks()
        # every block's active tensors before the first block runs (see ElasticMBConv.active_tensors)
        active = [block.active_tensors(matrix) for block, matrix in zip(blocks, self._active_kernel_matrices(blocks))]
        x = self.bn1(self.conv_stem(x))
        x = self.blocks[0](x)
        for block, tensors in zip(blocks, active):
            x = block(x, tensors)
        x = self.blocks[-1](x)
        x = self.flatten(self.act2(self.conv_head(self.global_pool(x))))
        return self.classifier(self.dropout(x))

    # ----------------------------------------------------------------- static subnets
    @torch.no_grad()
    def active_state_dict(self) -> dict[str, torch.Tensor]:
        """State dict of the static timm subnet equal to the active one."""
        elastic = tuple(f"blocks.{s + 1}." for s in range(self.space.num_stages))
        state = {k: v.clone() for k, v in self.state_dict().items() if not k.startswith(elastic)}
        slots = self._active_slots()
        blocks = [self.blocks[i][j] for i, j in slots]
        matrices = self._active_kernel_matrices(blocks)  # as forward builds them: bitwise the same weights
        for (i, j), block, matrix in zip(slots, blocks, matrices):
            for key, value in block.active_state(matrix).items():
                state[f"blocks.{i}.{j}.{key}"] = value
        return state

    def extract(self, arch: Arch | None = None) -> nn.Module:
        """A static timm MobileNetV3 computing exactly the subnet ``arch`` (default: the active one)."""
        return self.extract_checked(self.active_arch if arch is None else self.space.validate(arch))

    def extract_checked(self, arch: Arch) -> nn.Module:
        """`extract` of an arch its caller has validated against this space (export checks it once, at its entry)."""
        previous = self.active_arch
        self._activate(arch)
        model = timm_model(timm_args(self.space, arch))
        model.load_state_dict(self.active_state_dict())
        self._activate(previous)
        return model.train(self.training)

    def reorganize_for(self, trained: Mapping[str, Sequence[int]]) -> None:
        """Before a phase: sort expanded channels, keeping the order of the expand ratios already ``trained``."""
        self.reorganize_channels(frozen_expands=trained.get("expands", ()))

    @torch.no_grad()
    def reorganize_channels(self, frozen_expands: Sequence[int] = ()) -> None:
        """Sort every block's expanded channels by importance (the network function is unchanged)."""
        for stage in self.blocks[1:-1]:
            for block in stage:
                block.reorganize_channels(frozen_expands)

    # ----------------------------------------------------------------- files
    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> Path:
        """Supernet file: space + weights (+ plain metadata such as data normalization); see ``write_supernet``."""
        return write_supernet(path, self, meta)

    @classmethod
    def load(cls, path: str | Path) -> OFAMobileNetV3:
        """Load a supernet file (``.safetensors`` or torch) or a training checkpoint; ``net.meta`` holds the
        stored metadata."""
        return cls.from_record(*read_record(path), str(path))

    @classmethod
    def from_record(cls, record: dict[str, Any], state: dict[str, Any], source: str) -> OFAMobileNetV3:
        """The supernet of a record ``ofa.families.supernet_file.read_record`` read from ``source``."""
        net = cls(SearchSpace.from_dict(record["space"], f"{source}:space"))
        try:
            net.load_state_dict(state)
        except RuntimeError as exc:
            raise OFAError(f"{source}: weights do not match the stored space: {str(exc).splitlines()[0]}") from None
        net.meta = dict(record.get("meta") or {})
        return net

    def copy(self) -> OFAMobileNetV3:
        return copy.deepcopy(self)
