"""Store helpers shared by the tasks: atomic writes, zarr array creation, NGFF metadata."""
