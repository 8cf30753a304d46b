"""Synthetic data for demos, tests and benchmarks: blob images, CellVoyager folders."""
