"""The elastic OFA-ProxylessNAS supernet: one set of weights, any subnet of the space active."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ofa.families.mbv3.elastic import ElasticMBConv, kernel_matrices
from ofa.families.mbv3.supernet import CHECKPOINT_FORMAT, SAFETENSORS, SUPERNET_FORMAT
from ofa.families.proxyless.arch import ProxylessArch
from ofa.families.proxyless.encoding import sample_arch
from ofa.families.proxyless.layers import BN_EPS
from ofa.families.proxyless.space import ProxylessSpace
from ofa.families.proxyless.subnet import build_subnet, timm_args, timm_model
from ofa.utils.errors import OFAError
from ofa.utils.io import load_torch, save_torch
from ofa.utils.weights import load_safetensors, save_safetensors


class OFAProxylessNAS(nn.Module):
    """Supernet of an elastic ProxylessNAS space.

    The fixed parts (stem, first block, feature mix, classifier) are the very timm modules of the
    largest subnet; the elastic stages are mbv3's `ElasticMBConv` blocks (ReLU6, BN eps 1e-3, no SE)
    whose names mirror timm's ``InvertedResidual``, so ``extract`` is a state-dict copy.
    """

    def __init__(self, space: ProxylessSpace, num_classes: int | None = None) -> None:
        super().__init__()
        if num_classes is not None and num_classes != space.num_classes:
            space = ProxylessSpace.from_dict({**space.to_dict(), "num_classes": num_classes})
        self.space = space
        skeleton = build_subnet(space, space.max_arch())
        self.conv_stem, self.bn1 = skeleton.conv_stem, skeleton.bn1
        stages: list[nn.Module] = [skeleton.blocks[0]]
        for s in range(space.num_stages):
            blocks = [
                ElasticMBConv(*space.block_io(s, j), space.kernels, space.expands, False, "relu6", bn_eps=BN_EPS)
                for j in range(space.stage_slots(s))
            ]
            stages.append(nn.ModuleList(blocks))
        self.blocks = nn.ModuleList(stages)
        self.conv_head, self.bn2 = skeleton.conv_head, skeleton.bn2
        self.global_pool, self.classifier = skeleton.global_pool, skeleton.classifier
        self.dropout = nn.Dropout(space.dropout)
        self.active_arch = space.max_arch()
        self.set_active(self.active_arch)

    # ----------------------------------------------------------------- elastic control
    def set_active(self, arch: ProxylessArch) -> ProxylessArch:
        """Activate ``arch`` (resolution is the caller's: feed inputs of ``arch.resolution``)."""
        return self._activate(self.space.validate(arch))

    def _activate(self, arch: ProxylessArch) -> ProxylessArch:
        """`set_active` of an arch already validated against this space."""
        for s in range(self.space.num_stages):
            for j, block in enumerate(self.blocks[s + 1]):
                slot = self.space.slot(s, j)
                block.set_active(arch.kernels[slot], arch.expands[slot])
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
    ) -> ProxylessArch:
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
        x = self.global_pool(self.bn2(self.conv_head(x)))
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

    def extract(self, arch: ProxylessArch | None = None) -> nn.Module:
        """A static timm EfficientNet computing exactly the subnet ``arch`` (default: the active one)."""
        return self.extract_checked(self.active_arch if arch is None else self.space.validate(arch))

    def extract_checked(self, arch: ProxylessArch) -> nn.Module:
        """`extract` of an arch its caller has validated against this space."""
        previous = self.active_arch
        self._activate(arch)
        model = timm_model(timm_args(self.space, arch))
        model.load_state_dict(self.active_state_dict())
        self._activate(previous)
        return model.train(self.training)

    @torch.no_grad()
    def reorganize_channels(self, frozen_expands: Sequence[int] = ()) -> None:
        """Sort every block's expanded channels by importance (the network function is unchanged)."""
        for stage in self.blocks[1:]:
            for block in stage:
                block.reorganize_channels(frozen_expands)

    # ----------------------------------------------------------------- files
    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> Path:
        """Supernet file: space (``family: proxyless``) + weights (+ plain metadata); ``.safetensors`` or torch."""
        record = {"format": SUPERNET_FORMAT, "space": self.space.to_dict(), "meta": meta or {}}
        if Path(path).suffix == SAFETENSORS:
            return save_safetensors(path, self.state_dict(), record)
        return save_torch(path, {**record, "state_dict": self.state_dict()})

    @classmethod
    def load(cls, path: str | Path) -> OFAProxylessNAS:
        """Load a supernet file or a training checkpoint of this family; ``net.meta`` holds the stored metadata."""
        if Path(path).suffix == SAFETENSORS:
            state, obj = load_safetensors(path, "supernet file")
            obj = {**obj, "state_dict": state}
        else:
            obj = load_torch(path, "supernet checkpoint")
        fmt = obj.get("format")
        if fmt not in (SUPERNET_FORMAT, CHECKPOINT_FORMAT):
            raise OFAError(f"{path}: not an ofa supernet or training checkpoint (format={fmt!r})")
        state = obj.get("state_dict" if fmt == SUPERNET_FORMAT else "model")
        if not isinstance(obj.get("space"), dict) or not isinstance(state, dict):
            raise OFAError(f"{path}: checkpoint lacks its space or weights")
        net = cls(ProxylessSpace.from_dict(obj["space"], f"{path}:space"))
        try:
            net.load_state_dict(state)
        except RuntimeError as exc:
            raise OFAError(f"{path}: weights do not match the stored space: {str(exc).splitlines()[0]}") from None
        net.meta = dict(obj.get("meta") or {})
        return net

    def copy(self) -> OFAProxylessNAS:
        return copy.deepcopy(self)
