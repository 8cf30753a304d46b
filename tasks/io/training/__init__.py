"""Training stores: Blosc2 layouts and codec trials, cuboids, the patch dataset."""
