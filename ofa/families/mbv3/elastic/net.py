"""What an elastic-MBConv supernet does whatever its fixed layers: OFA-MBv3's and OFA-ProxylessNAS's.

Both hold their elastic stages as ``self.blocks[1 .. num_stages]`` of `ElasticMBConv` (slot
``stage * max_depth + index`` of an arch), between fixed timm modules of the largest subnet, so
activating, sampling, extracting a static timm subnet, channel sorting and files are the same code.
A subclass builds the modules, names its family's functions and runs its fixed head (`head`).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from ofa.families.mbv3.elastic.block import ElasticMBConv
from ofa.families.mbv3.elastic.ops import kernel_matrices
from ofa.families.supernet_file import read_record, write_supernet
from ofa.utils.errors import OFAError


class ElasticMBConvNet(nn.Module, ABC):
    """Base of a supernet whose elastic stages are `ElasticMBConv` blocks named as timm's."""

    space_type: ClassVar[type]  # the family's space (from_dict)
    sample_arch: ClassVar[Callable[..., Any]]  # (space, rng, **restrictions) -> arch
    timm_args: ClassVar[Callable[[Any, Any], dict[str, Any]]]  # (space, arch) -> args of timm_model
    timm_model: ClassVar[Callable[[dict[str, Any]], nn.Module]]

    space: Any
    blocks: nn.ModuleList
    active_arch: Any

    @abstractmethod
    def head(self, x: torch.Tensor) -> torch.Tensor:
        """The fixed layers after the elastic stages, up to the classifier's input."""

    # ----------------------------------------------------------------- elastic control
    def set_active(self, arch: Any) -> Any:
        """Activate ``arch`` (resolution is the caller's: feed inputs of ``arch.resolution``)."""
        return self._activate(self.space.validate(arch))

    def _activate(self, arch: Any) -> Any:
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
    ) -> Any:
        """Activate a random subnet (the family's ``sample_arch``), optionally restricted to subsets of the choices."""
        arch = type(self).sample_arch(
            self.space, rng, kernels=kernels, expands=expands, depths=depths, resolutions=resolutions
        )
        return self.set_active(arch)

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
        return self.classifier(self.dropout(self.head(x)))

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

    def extract(self, arch: Any | None = None) -> nn.Module:
        """A static timm model computing exactly the subnet ``arch`` (default: the active one)."""
        return self.extract_checked(self.active_arch if arch is None else self.space.validate(arch))

    def extract_checked(self, arch: Any) -> nn.Module:
        """`extract` of an arch its caller has validated against this space (export checks it once, at its entry)."""
        previous = self.active_arch
        self._activate(arch)
        model = type(self).timm_model(type(self).timm_args(self.space, arch))
        model.load_state_dict(self.active_state_dict())
        self._activate(previous)
        return model.train(self.training)

    def reorganize_for(self, trained: Mapping[str, Sequence[int]]) -> None:
        """Before a phase: sort expanded channels, keeping the order of the expand ratios already ``trained``."""
        self.reorganize_channels(frozen_expands=trained.get("expands", ()))

    @torch.no_grad()
    def reorganize_channels(self, frozen_expands: Sequence[int] = ()) -> None:
        """Sort every block's expanded channels by importance (the network function is unchanged)."""
        for stage in self.blocks[1 : 1 + self.space.num_stages]:
            for block in stage:
                block.reorganize_channels(frozen_expands)

    # ----------------------------------------------------------------- files
    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> Path:
        """Supernet file: space + weights (+ plain metadata such as data normalization); see ``write_supernet``."""
        return write_supernet(path, self, meta)

    @classmethod
    def load(cls, path: str | Path) -> Any:
        """Load a supernet file (``.safetensors`` or torch) or a training checkpoint; ``net.meta`` holds the
        stored metadata."""
        return cls.from_record(*read_record(path), str(path))

    @classmethod
    def from_record(cls, record: dict[str, Any], state: dict[str, Any], source: str) -> Any:
        """The supernet of a record ``ofa.families.supernet_file.read_record`` read from ``source``."""
        net = cls(cls.space_type.from_dict(record["space"], f"{source}:space"))
        try:
            net.load_state_dict(state)
        except RuntimeError as exc:
            raise OFAError(f"{source}: weights do not match the stored space: {str(exc).splitlines()[0]}") from None
        net.meta = dict(record.get("meta") or {})
        return net

    def copy(self) -> Any:
        return copy.deepcopy(self)
