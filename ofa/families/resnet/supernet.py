"""The elastic OFA-ResNet supernet: one set of weights, any subnet of the space active.

Computes what the official ``OFAResNets`` computes with the same subnet active: prefix channel
slices of every conv, BN and the classifier; the stem's residual block skipped below the largest stem
depth gene; a stage's last blocks dropped for smaller extra depths. Module names mirror timm's
``ByobNet`` (``stem.conv1..3``, ``stages.S.J``, ``head.fc``), so ``extract`` is a state-dict copy.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ofa.families.resnet.arch import ResNetArch
from ofa.families.resnet.elastic import ElasticBottleneck, ElasticConvBn, ElasticLinear
from ofa.families.resnet.encoding import sample_arch
from ofa.families.resnet.layers import mid_channels
from ofa.families.resnet.space import ResNetSpace
from ofa.families.resnet.subnet import timm_args, timm_model
from ofa.families.supernet_file import read_record, write_supernet
from ofa.utils.errors import OFAError


class OFAResNet(nn.Module):
    """Supernet of an elastic ResNet space (every module at its largest widths)."""

    def __init__(self, space: ResNetSpace) -> None:
        super().__init__()
        self.space = space
        mid, out = max(space.stem_mid_choices()), max(space.stem_out_choices())
        self.stem = nn.Module()
        self.stem.conv1 = ElasticConvBn(space.in_channels, mid, 3, space.stem_stride)
        self.stem.conv2 = ElasticConvBn(mid, mid, 3)
        self.stem.conv3 = ElasticConvBn(mid, out, 3)
        stages = []
        for s in range(space.num_stages):
            width, stride = max(space.stage_choices(s)), space.strides[s]
            mid_max = mid_channels(width, max(space.expands))
            blocks = [ElasticBottleneck(out, width, mid_max, stride, True)]
            blocks += [ElasticBottleneck(width, width, mid_max, 1, False) for _ in range(1, space.stage_slots(s))]
            stages.append(nn.ModuleList(blocks))
            out = width
        self.stages = nn.ModuleList(stages)
        self.head = nn.Module()
        self.head.fc = ElasticLinear(out, space.num_classes)
        self.dropout = nn.Dropout(space.dropout)
        self.active_arch = space.max_arch()

    # ----------------------------------------------------------------- elastic control
    def set_active(self, arch: ResNetArch) -> ResNetArch:
        """Activate ``arch`` (resolution is the caller's: feed inputs of ``arch.resolution``)."""
        self.active_arch = self.space.validate(arch)
        return self.active_arch

    def sample_active(
        self,
        rng: np.random.Generator | int | None = None,
        *,
        depths: Sequence[int] | None = None,
        expands: Sequence[float] | None = None,
        widths: Sequence[int] | None = None,
        resolutions: Sequence[int] | None = None,
    ) -> ResNetArch:
        """Activate a random subnet (``encoding.sample_arch``), optionally restricted to subsets of the choices."""
        arch = sample_arch(self.space, rng, depths=depths, expands=expands, widths=widths, resolutions=resolutions)
        return self.set_active(arch)

    def _active_blocks(self) -> list[tuple[int, int, ElasticBottleneck, int, int]]:
        """(stage, index, block, middle width, output width) of each block the active subnet runs."""
        space, arch = self.space, self.active_arch
        _, _, outs = space.channels(arch)
        return [
            (s, j, self.stages[s][j], mid_channels(outs[s], arch.expands[space.slot_offset(s) + j]), outs[s])
            for s in range(space.num_stages)
            for j in range(space.stage_depth(arch, s))
        ]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mid, out, _ = self.space.channels(self.active_arch)
        x = self.stem.conv1(x, mid)
        if self.space.stem_block_runs(self.active_arch):
            x = x + self.stem.conv2(x, mid)
        x = self.stem.conv3(x, out)
        if self.space.stem_pool:
            x = F.max_pool2d(x, 3, 2, 1)
        for _, _, block, block_mid, block_out in self._active_blocks():
            x = block(x, block_mid, block_out)
        return self.head.fc(self.dropout(x.mean((2, 3))))

    # ----------------------------------------------------------------- static subnets
    @torch.no_grad()
    def active_state_dict(self) -> dict[str, torch.Tensor]:
        """State dict of the static timm ByobNet equal to the active subnet."""
        mid, c, _ = self.space.channels(self.active_arch)
        stem = [("conv1", self.stem.conv1, self.space.in_channels, mid)]
        if self.space.stem_block_runs(self.active_arch):
            stem.append(("conv2", self.stem.conv2, mid, mid))
        stem.append((f"conv{len(stem) + 1}", self.stem.conv3, mid, c))
        state = {f"stem.{n}.{k}": v for n, op, i, o in stem for k, v in op.active_state(i, o).items()}
        for s, j, block, block_mid, out in self._active_blocks():
            state.update({f"stages.{s}.{j}.{k}": v for k, v in block.active_state(c, block_mid, out).items()})
            c = out
        state["head.fc.weight"] = self.head.fc.weight[:, :c].clone()
        state["head.fc.bias"] = self.head.fc.bias.clone()
        return state

    def extract(self, arch: ResNetArch | None = None) -> nn.Module:
        """A static timm ByobNet computing exactly the subnet ``arch`` (default: the active one)."""
        return self.extract_checked(self.active_arch if arch is None else self.space.validate(arch))

    def extract_checked(self, arch: ResNetArch) -> nn.Module:
        """`extract` of an arch its caller has validated against this space."""
        previous, self.active_arch = self.active_arch, arch
        try:
            model = timm_model(timm_args(self.space, arch))
            model.load_state_dict(self.active_state_dict())
        finally:
            self.active_arch = previous
        return model.train(self.training)

    def reorganize_for(self, trained: Mapping[str, Sequence[Any]]) -> None:
        """Before a phase: sort middle channels, keeping the channel sets of the expand ratios already ``trained``."""
        self.reorganize_channels(frozen_expands=trained.get("expands", ()))

    @torch.no_grad()
    def reorganize_channels(self, frozen_expands: Sequence[float] = ()) -> None:
        """Sort every bottleneck's middle channels by importance (the network function is unchanged).

        The channel sets of ``frozen_expands`` (ratios trained by earlier phases) at a stage's largest
        width stay in place: sorting only happens within the bands between them, as the official code does.
        """
        for s, stage in enumerate(self.stages):
            width = max(self.space.stage_choices(s))
            bands = [mid_channels(width, e) for e in (*frozen_expands, max(self.space.expands))]
            for block in stage:
                block.reorganize_channels(bands)

    # ----------------------------------------------------------------- files
    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> Path:
        """Supernet file: space + weights (+ plain metadata such as data normalization); see ``write_supernet``."""
        return write_supernet(path, self, meta)

    @classmethod
    def load(cls, path: str | Path) -> OFAResNet:
        """Load a supernet file or training checkpoint of a resnet space; ``net.meta`` holds the stored metadata."""
        return cls.from_record(*read_record(path), str(path))

    @classmethod
    def from_record(cls, record: dict[str, Any], state: dict[str, Any], source: str) -> OFAResNet:
        """The supernet of a supernet file's record (space mapping, meta) and weights read from ``source``."""
        net = cls(ResNetSpace.from_dict(record["space"], f"{source}:space"))
        try:
            net.load_state_dict(state)
        except RuntimeError as exc:
            raise OFAError(f"{source}: weights do not match the stored space: {str(exc).splitlines()[0]}") from None
        net.meta = dict(record.get("meta") or {})
        return net

    def copy(self) -> OFAResNet:
        return copy.deepcopy(self)
