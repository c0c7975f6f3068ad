"""Data sets (embedded digits, Fashion-MNIST, synthetic, image folders), IDX files and the loaders."""
