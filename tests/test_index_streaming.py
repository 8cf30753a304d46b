"""Instrument indexes are read streaming: memory follows the planes zarrmill keeps, not the size of
the XML (a 1536-well Harmony index is hundreds of MB). Each index is read, then padded with the kind
of per-image detail instruments write and zarrmill does not keep, and read again: the peak may grow
by far less than the file did (a whole-tree parse grows by several times the file)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_task

PAD = "x" * 6000  # per image: settings, acquisition notes, ... (not read)
PEAK_READING = """
import sys, tracemalloc
from pathlib import Path
from zarrmill.io.readers.registry import ReadOptions, reader
fmt, raw = sys.argv[1], Path(sys.argv[2])
options = ReadOptions(plate_shape=(8, 12) if fmt == "scanr" else None)
reader(fmt).read(raw, options)  # imports and caches first: only the read itself is measured
tracemalloc.start()
acq = reader(fmt).read(raw, options)
assert len(acq.planes) == 4 * 9 * 2 * 3
print(tracemalloc.get_traced_memory()[1])
"""


def pad(path: Path, tag: str, inside: str) -> int:
    text = path.read_text(encoding="utf-8")
    text = re.sub(f"(<{tag}\\b[^>]*>)", lambda m: m.group(1) + inside, text)
    path.write_text(text, encoding="utf-8")
    return path.stat().st_size


@pytest.mark.parametrize("fmt", ["operetta", "scanr"])
def test_an_index_is_read_in_memory_well_below_its_size(cli, tmp_path, fmt):
    raw = tmp_path / "raw"
    code, err = run_task(cli, "generate-plate", f"output={raw}", f"format={fmt}", "wells=[B03,B04,C03,C04]",
                         "grid=[3,3]", "shape=[8,8]", "channels=2", "z_planes=3", "blobs_per_field=0")
    assert code == 0, err
    index = raw / "Images" / "Index.idx.xml" if fmt == "operetta" else next(raw.rglob("*.ome.xml"))

    def peak_reading() -> int:
        # in a process of its own: tracemalloc counts every thread's allocations, and threads an
        # earlier test left (a dask cluster closing, a client's event loop) must not count here
        done = subprocess.run([sys.executable, "-c", PEAK_READING, fmt, str(raw)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    plain_size, plain_peak = index.stat().st_size, peak_reading()
    if fmt == "operetta":
        size = pad(index, "Image", f"<Notes>{PAD}</Notes>")
    else:
        size = pad(index, "Image", f"<Description>{PAD * 6}</Description>")  # one image per field: more each
    assert size > 1_000_000
    grown = peak_reading() - plain_peak
    # the same planes, an index several times larger: a streaming read barely grows (a whole-tree
    # parse grows by about 4x what the file did)
    assert grown < (size - plain_size) / 4, f"peak grew {grown / 1e6:.2f} MB for {(size - plain_size) / 1e6:.1f} MB more index"
