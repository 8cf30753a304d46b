"""Storage: arrays, whole-chunk I/O, atomic writes, the output guard, input fingerprints."""
