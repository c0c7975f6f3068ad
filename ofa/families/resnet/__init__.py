"""OFA-ResNet50: the elastic ResNet-D supernet of once-for-all (depths, bottleneck expands, widths)."""
