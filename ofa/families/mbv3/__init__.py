"""The elastic MobileNetV3 family: space and arch, gene encoding, elastic blocks, supernet, subnet, official import."""
