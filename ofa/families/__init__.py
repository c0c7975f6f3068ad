"""Supernet families: each subpackage holds one family's space, arch, elastic blocks, supernet and importer."""
