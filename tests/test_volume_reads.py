"""A TIFF volume whose pixels are one run of bytes is read by offset (#39): every region equals what
tifffile reads, for any shape of region; TIFFs that are not (compressed, big-endian, tiled) go
through tifffile as before, with the same pixels."""
import numpy as np
import pytest
import tifffile

from zarrmill.io.readers.volume import RawPixels, open_volume

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
