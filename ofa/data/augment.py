"""Random augmentations that run once per image in the training loop, where their cost shows.

torchvision's ``v2.RandomAffine`` spends most of its time on a small image in dispatch and grid
construction, once per image and epoch: a visible share of the digits demo's training.
`RandomAffineGrid` draws the same parameters in the same order from torch's default generator (so
`ofa.data.datasets.ImageSplit`'s per-image seeding holds) and warps with one ``affine_grid`` +
``grid_sample`` call: the same images, pixel for pixel (`tests/test_data.py`), for less per image
(`python -m bench.augment_speed`).
"""

from __future__ import annotations

import functools
import math
from array import array

import torch
import torch.nn.functional as F
from torch import nn


class RandomAffineGrid(nn.Module):
    """Rotation by up to ``degrees`` about the centre, a shift of up to ``translate`` of the width/height (whole
    pixels) and a scale drawn from ``scale``, on a C×H×W float tensor."""

    def __init__(self, degrees: float, translate: tuple[float, float], scale: tuple[float, float]) -> None:
        super().__init__()
        self.degrees, self.translate, self.scale = float(degrees), translate, scale

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.shape[-2:]
        angle = torch.empty(1).uniform_(-self.degrees, self.degrees).item()
        max_dx, max_dy = self.translate[0] * width, self.translate[1] * height
        shift_x = round(torch.empty(1).uniform_(-max_dx, max_dx).item())
        shift_y = round(torch.empty(1).uniform_(-max_dy, max_dy).item())
        scale = torch.empty(1).uniform_(*self.scale).item()
        return affine(image, angle, (shift_x, shift_y), scale)


def affine(image: torch.Tensor, angle: float, shift: tuple[int, int], scale: float) -> torch.Tensor:
    """``image`` rotated by ``angle`` degrees (clockwise as displayed) and scaled by ``scale`` about its centre,
    then shifted by ``shift`` pixels (x right, y down); nearest pixel, zeros outside: torchvision's ``affine`` with
    no shear, computed the same way (its inverse matrix, grid and sampling), so pixel for pixel."""
    height, width = image.shape[-2:]
    rad = math.radians(angle)
    cos, sin = math.cos(rad) / scale, math.sin(rad) / scale
    m = array("f", [cos, sin, -cos * shift[0] - sin * shift[1], -sin, cos, sin * shift[0] - cos * shift[1]])
    # torchvision's float32 inverse matrix over half the sides, built in one step: two float32 numbers' quotient
    # rounded to double, then to float32, is their float32 quotient.
    half_w, half_h = 0.5 * width, 0.5 * height
    rows = [[m[0] / half_w, m[3] / half_h], [m[1] / half_w, m[4] / half_h], [m[2] / half_w, m[5] / half_h]]
    scaled = torch.tensor([rows], dtype=torch.float32).to(image.dtype)
    grid = _pixel_grid(height, width, image.dtype).bmm(scaled).view(1, height, width, 2)
    return F.grid_sample(image[None], grid, mode="nearest", padding_mode="zeros", align_corners=False)[0]


@functools.cache
def _pixel_grid(height: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """Every pixel's (x, y, 1), x and y from the image centre: 1 × (height·width) × 3."""
    grid = torch.empty(1, height, width, 3, dtype=dtype)
    grid[..., 0].copy_(torch.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, steps=width))
    grid[..., 1].copy_(torch.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, steps=height).unsqueeze_(-1))
    grid[..., 2].fill_(1)
    return grid.view(1, height * width, 3)
