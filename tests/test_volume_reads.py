"""A TIFF volume whose pixels are one run of bytes is read by offset (#39): every region equals what
tifffile reads, for any shape of region; TIFFs that are not (compressed, big-endian, tiled) go
through tifffile as before, with the same pixels."""
import numpy as np
import pytest
import tifffile

from zarrmill.io.readers.volume import RawPixels, open_volume
from zarrmill.ingest_units import ImageRegionUnit

REGIONS = [
    [(0, 5), (0, 40), (0, 33)],  # all of it
    [(1, 3), (0, 40), (0, 33)],  # whole planes
    [(0, 5), (7, 19), (0, 33)],  # whole rows
    [(2, 4), (3, 11), (5, 29)],  # part of each row
    [(4, 5), (39, 40), (32, 33)],  # the last pixel
]


@pytest.fixture(scope="module")
def volume() -> np.ndarray:
    return np.random.default_rng(3).integers(0, 60000, (5, 40, 33), dtype=np.uint16)


@pytest.mark.parametrize("kind", ["imagej", "plain", "ome"])
def test_contiguous_tiffs_are_read_by_offset_and_equal_tifffile(tmp_path, volume, kind):
    path = tmp_path / ("v.ome.tif" if kind == "ome" else "v.tif")
    if kind == "imagej":
        tifffile.imwrite(path, volume, imagej=True, metadata={"axes": "ZYX"})
    else:
        tifffile.imwrite(path, volume, metadata={"axes": "ZYX"}, ome=kind == "ome")
    vol = open_volume(path)
    assert isinstance(vol.source, RawPixels), "a contiguous uncompressed TIFF is read by offset"
    for region in REGIONS:
        got = vol.read(region)
        assert np.array_equal(got, volume[tuple(slice(a, b) for a, b in region)]), region
        assert got.flags.c_contiguous and got.dtype == volume.dtype


@pytest.mark.parametrize("how", [dict(compression="zlib"), dict(byteorder=">"), dict(tile=(16, 16))])
def test_other_tiffs_go_through_tifffile_with_the_same_pixels(tmp_path, volume, how):
    path = tmp_path / "v.tif"
    tifffile.imwrite(path, volume, metadata={"axes": "ZYX"}, **how)
    vol = open_volume(path)
    assert not isinstance(vol.source, RawPixels)
    for region in REGIONS:
        assert np.array_equal(vol.read(region), volume[tuple(slice(a, b) for a, b in region)]), region


def test_a_truncated_tiff_says_so(tmp_path, volume):
    path = tmp_path / "v.tif"
    tifffile.imwrite(path, volume, metadata={"axes": "ZYX"})
    vol = open_volume(path)
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - volume[-1].nbytes // 2)
    with pytest.raises(Exception, match="ends inside its pixels"):
        vol.read([(0, 5), (0, 40), (0, 33)])


ALLOCATION_PROBE = """
import ctypes, sys
from zarrmill.runtime.core import malloc
malloc.return_freed_memory()
malloc.use_profile(sys.argv[1])

class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
before = libc.mallinfo2().hblks
buffers = [bytearray(int(sys.argv[2])) for _ in range(8)]
print(libc.mallinfo2().hblks - before)  # buffers that got a mapping of their own
"""


@pytest.mark.parametrize("profile, size, user, fresh_mappings", [
    ("steady", 4 << 20, None, True), ("speed", 4 << 20, None, False), ("speed", 4 << 20, "1048576", True),
    ("steady", (1 << 20) + 4096, None, False), ("steady", (1 << 20) + 4096, "1048576", True)])
def test_the_allocator_profile_decides_where_mid_size_buffers_come_from(profile, size, user, fresh_mappings):
    """``steady``: 4 MiB buffers are mappings of their own (given back on free), a 1 MiB Blosc
    block's scratch (a little over 1 MiB) comes from the heap (reused: a fresh mapping for each was
    half the plate's page faults); ``speed``: 4 MiB ones come from the heap too; a user's
    MALLOC_MMAP_THRESHOLD_ wins over the profile."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "ZARRMILL_MALLOC_DEFAULTS"}
    if user:
        env["MALLOC_MMAP_THRESHOLD_"] = user
    out = subprocess.run([sys.executable, "-c", ALLOCATION_PROBE, profile, str(size)], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert (int(out) >= 8) == fresh_mappings, out


def test_volume_units_ask_for_the_speed_profile(tmp_path, volume):
    from zarrmill.io.storage.guard import open_guard
    from zarrmill.runtime.core.contract import PlanContext
    from zarrmill.runtime.execution.registry import get_task

    tifffile.imwrite(tmp_path / "v.tif", volume, imagej=True, metadata={"axes": "ZYX"})
    task = get_task("ingest")
    params = task.params_model(input=str(tmp_path / "v.tif"), output=str(tmp_path / "v.zarr"), pyramid=True)
    guard = open_guard(params.ledger_root(), params.input_paths())
    guard.claim("ingest")
    units = task.plan(params, PlanContext(step="ingest", resume=False, overwrite=False, guard=guard))
    regions = [u for u in units if isinstance(u, ImageRegionUnit)]  # level 0's, not the levels read back
    assert regions and all(u.allocator == "speed" for u in regions)
    guard.rollback()
