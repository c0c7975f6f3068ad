"""OFA-ProxylessNAS: the official once-for-all ProxylessNAS supernet family (space, supernet, timm subnets)."""
