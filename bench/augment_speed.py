"""What the demo's training split costs per image: torchvision's transforms against the project's.

The digits recipe's ``augment: light`` split, read image by image as the training loader reads it, two
ways in one run: torchvision's ``v2.Compose([Resize, RandomAffine, Normalize])`` under the per-image seed
(what `ofa.data.datasets.ImageSplit` did before), and the split itself (its resize kept per image, then
`ofa.data.augment.RandomAffineGrid` + normalize under the same seed). Both make the same images (checked
here, as in the tests); the rounds alternate which goes first, and the figure is the median of the
per-round ratios, so host noise hits both alike.

    python -m bench.augment_speed [--rounds 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from torchvision.transforms import v2

from ofa.data.augment import RandomAffineGrid
from ofa.data.datasets import ImageSplit, build_data


def torchvision_split(split: ImageSplit) -> ImageSplit:
    """``split`` as torchvision alone made it: its steady resize, torchvision's ``RandomAffine`` with the grid
    warp's own ranges in that warp's place, the rest as it is, all under the per-image seed."""

    def torchvision(step: torch.nn.Module) -> torch.nn.Module:
        if isinstance(step, RandomAffineGrid):
            return v2.RandomAffine(degrees=step.degrees, translate=step.translate, scale=step.scale)
        return step

    chain = v2.Compose([split.transform, *map(torchvision, split.augment.transforms)])
    return ImageSplit(split.source, split.indices, lambda image: image, chain, split.seed)


def timed(split: ImageSplit) -> tuple[float, list[torch.Tensor]]:
    """Seconds to read every image of ``split`` in order, and the images."""
    start = time.perf_counter()
    images = [split[i][0] for i in range(len(split))]
    return time.perf_counter() - start, images


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data = build_data({"name": "digits", "image_size": 16, "augment": "light"})
    splits = {"ofa": data.train, "torchvision": torchvision_split(data.train)}
    timed(splits["ofa"])  # the first epoch fills the split's kept resizes, as a run's first epoch does
    ratios, per_image = [], {"torchvision": [], "ofa": []}
    for r in range(args.rounds):
        seconds, images = {}, {}
        for name in sorted(splits, reverse=r % 2 == 1):
            splits[name].set_epoch(r)
            seconds[name], images[name] = timed(splits[name])
            per_image[name].append(1e6 * seconds[name] / len(splits[name]))
        if not all(torch.equal(a, b) for a, b in zip(images["torchvision"], images["ofa"], strict=True)):
            print("augment_speed: the two ways made different images", file=sys.stderr)
            return 1
        ratios.append(seconds["torchvision"] / seconds["ofa"])
    result = {
        "images": len(data.train),
        "rounds": args.rounds,
        "torchvision_us_per_image": round(statistics.median(per_image["torchvision"]), 1),
        "ofa_us_per_image": round(statistics.median(per_image["ofa"]), 1),
        "speedup": round(statistics.median(ratios), 2),
        "same_images": True,
    }
    print(
        f"{result['images']} training images a round, {args.rounds} rounds: torchvision "
        f"{result['torchvision_us_per_image']} µs, ofa {result['ofa_us_per_image']} µs per image; "
        f"median ratio {result['speedup']}x, the same images"
    )
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
