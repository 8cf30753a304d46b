"""compress and tune on real files: bit-exact round trips, layout rule bounds, readers, bad input."""
import itertools
import json
import math

import blosc2
import numpy as np
import tifffile
import pytest
import yaml
import zarr

from zarrmill.io.training.b2layout import (
    MAX_BLOCK,
    MAX_CHUNK,
    bytes_touched_factor,
    nnunet_layout,
    patch_layout,
)
from zarrmill.io.training.b2store import open_patches


def compress(cli, *sets):
    args = ["task", "compress", "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    return cli(*args)


def compress_saved(cli, tmp_path, data, out, *sets):
    """Save ``data`` as v.npy in tmp_path and compress it into ``out``; (code, stdout, stderr)."""
    np.save(tmp_path / "v.npy", data)
    return compress(cli, f"input={tmp_path / 'v.npy'}", f"output={tmp_path / out}", *sets)


def volume(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    base = np.cumsum(rng.integers(-3, 4, size=shape), axis=-1)  # smooth-ish, compressible
    if np.dtype(dtype).kind == "f":
        return (base * 0.37).astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(base + (info.max // 2 if info.min == 0 else 0), info.min, info.max).astype(dtype)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int16", "float32"])
@pytest.mark.parametrize("shape,patch", [((37, 61, 53), [16, 24, 20]), ((2, 19, 45, 33), [8, 16, 16])])
def test_b2nd_round_trip_is_bit_exact(cli, tmp_path, dtype, shape, patch):
    data = volume(shape, dtype)
    np.save(tmp_path / "case.npy", data)
    code, _, err = compress(cli, f"input={tmp_path / 'case.npy'}", f"output={tmp_path / 'out'}", f"patch={patch}")
    assert code == 0, err
    path = tmp_path / "out" / "case.b2nd"
    plain = blosc2.open(str(path), mode="r", mmap_mode="r")
    np.testing.assert_array_equal(plain[...], data)
    arr = open_patches(path)
    sl = tuple(slice(1, 1 + p) for p in patch)
    lead = (slice(None),) * (len(shape) - len(patch))
    np.testing.assert_array_equal(arr[lead + sl], data[lead + sl])
    chunks, blocks = patch_layout(shape, np.dtype(dtype).itemsize, patch)
    assert tuple(plain.chunks) == tuple(min(c, s) for c, s in zip(chunks, shape))
    assert arr.meta["codec"] in {"lz4", "lz4hc", "zstd", "blosclz"} and arr.meta["patch"] == patch


def test_folder_of_cases_and_recorded_codec(cli, tmp_path):
    (tmp_path / "cases").mkdir()
    for i in range(3):
        np.save(tmp_path / "cases" / f"case_{i}.npy", volume((1, 20 + i, 40, 30), "uint16", seed=i))
    code, _, err = compress(cli, f"input={tmp_path / 'cases'}", f"output={tmp_path / 'out'}", "patch=[8,16,16]",
                            "policy=ratio")
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "zarrmill" / "compress.json").read_text())
    assert summary["state"] == "done" and len(summary["cases"]) == 3
    assert summary["codec"]["chosen_by"] == "trial (ratio)"
    best = max(summary["codec"]["trial"], key=lambda t: (round(t["ratio"], 3), t["decompress_gbs"]))
    assert summary["codec"]["codec"] == best["codec"] and summary["codec"]["filter"] == best["filter"]
    # bytedelta is for min_ratio only: in the policies' band it pushed LZ4HC out (3x slower patches)
    assert {t["filter"] for t in summary["codec"]["trial"]} == {"shuffle", "bitshuffle", "nofilter"}
    for i in range(3):
        np.testing.assert_array_equal(blosc2.open(str(tmp_path / "out" / f"case_{i}.b2nd"))[...],
                                      np.load(tmp_path / "cases" / f"case_{i}.npy"))


def test_zarr_output_reads_with_stock_zarr_and_ome_zarr(cli, tmp_path):
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    data = volume((2, 24, 50, 40), "uint16")
    code, _, err = compress_saved(cli, tmp_path, data, "out.zarr", "format=zarr", "patch=[8,16,16]",
                                  "shards=[1,16,32,32]")
    assert code == 0, err
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "out.zarr" / "v" / "0"))[:], data)
    node = list(Reader(parse_url(str(tmp_path / "out.zarr" / "v")))())[0]
    np.testing.assert_array_equal(np.asarray(node.data[0]), data)
    codecs = json.loads((tmp_path / "out.zarr" / "v" / "0" / "zarr.json").read_text())["codecs"]
    inner = codecs[0]["configuration"]["codecs"]
    assert codecs[0]["name"] == "sharding_indexed" and inner[-1]["name"] == "blosc"


CASES = [(shape, itemsize, patch) for shape, patch in [
    ((1, 256, 384, 384), (128, 128, 128)), ((1, 256, 384, 384), (20, 50, 50)), ((4, 80, 512, 512), (64, 160, 160)),
    ((1, 30, 40, 50), (7, 9, 11)), ((3, 1024, 1024), (256, 256)), ((1, 600, 700), (97, 33)),
    ((2, 9, 2000, 2000), (1, 512, 512)), ((1, 48, 64, 64), (48, 64, 64))] for itemsize in (1, 2, 4)]


@pytest.mark.parametrize("shape,itemsize,patch", CASES)
def test_layout_rule_bounds(shape, itemsize, patch):
    chunks, blocks = patch_layout(shape, itemsize, patch)
    n_lead = len(shape) - len(patch)
    assert chunks[:n_lead] == blocks[:n_lead] == (1,) * n_lead
    assert math.prod(blocks) * itemsize <= MAX_BLOCK
    assert math.prod(chunks) * itemsize <= max(MAX_CHUNK, math.prod(blocks) * itemsize)
    for c, b, s, p in zip(chunks[n_lead:], blocks[n_lead:], shape[n_lead:], patch):
        assert b <= max(1, p // 2) and c <= s
        assert c % b == 0 or c == s  # chunks are whole blocks unless clipped by the image
    n_chunks, n_blocks = nnunet_layout(shape, itemsize, patch) if len(shape) >= 3 and len(patch) == 3 else (None, None)
    if n_blocks:
        assert math.prod(n_blocks) * itemsize <= 128 * 1024 and math.prod(n_chunks) * itemsize <= 6 * 2**20
        # chunks grow to 1.5x the patch; a block rounded up to a power of two can already be larger
        assert all(c <= max(b, int(1.5 * p)) for c, b, p in zip(n_chunks[-3:], n_blocks[-3:], patch))


@pytest.mark.parametrize("patch,block", [((20, 50, 50), (8, 16, 16)), ((128, 128, 128), (32, 32, 32)), ((7, 9, 11), (2, 2, 4))])
def test_random_patch_touches_at_most_the_documented_blocks(patch, block):
    """Brute force over every offset within a block period: blocks touched per axis <= ceil((p - 1) / b) + 1,
    and the mean decompressed volume equals bytes_touched_factor."""
    per_axis_max = [math.ceil((p - 1) / b) + 1 for p, b in zip(patch, block)]
    touched = []
    for offsets in itertools.product(*[range(b) for b in block]):
        counts = [((o + p - 1) // b) - (o // b) + 1 for o, p, b in zip(offsets, patch, block)]
        assert all(c <= m for c, m in zip(counts, per_axis_max))
        touched.append(math.prod(c * b for c, b in zip(counts, block)))
    assert np.mean(touched) / math.prod(patch) == pytest.approx(bytes_touched_factor(patch, block))


def test_bad_input_is_one_clear_line(cli, tmp_path):
    np.save(tmp_path / "small.npy", np.zeros((10, 20, 20), np.uint16))
    np.save(tmp_path / "cplx.npy", np.zeros((10, 20, 20), np.complex64))
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    (tmp_path / "same").mkdir()
    np.save(tmp_path / "same" / "case.npy", np.zeros((10, 20, 20), np.uint16))
    tifffile.imwrite(tmp_path / "same" / "case.tif", np.zeros((10, 20, 20), np.uint16))
    cases = [("small.npy", "patch=[16,16,16]", "patch [16, 16, 16] is larger than the image [10, 20, 20]"),
             ("cplx.npy", "patch=[4,4,4]", "cplx.npy: pixel type complex64 is not bool, integer or float"),
             ("bad.npy", "patch=[4,4,4]", "bad.npy: not a readable .npy file"),
             ("same", "patch=[4,4,4]", "both become case 'case' once the extension is removed")]
    for name, patch, says in cases:  # every one of them one line, and nothing written
        code, _, err = compress(cli, f"input={tmp_path / name}", f"output={tmp_path / 'o'}", patch)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("zarrmill: error: ") and says in lines[0], err
        assert not (tmp_path / "o").exists()


def test_tune_writes_table_plot_and_params_compress_accepts(cli, tmp_path):
    np.save(tmp_path / "sample.npy", volume((1, 40, 64, 64), "uint16"))
    code, out, err = cli("tune", tmp_path / "sample.npy", "--patch", "16,32,32", "--output", tmp_path / "tune",
                         "--seconds", "3")
    assert code == 0, err
    assert (tmp_path / "tune" / "tune.png").stat().st_size > 1000
    rows = (tmp_path / "tune" / "tune.csv").read_text().splitlines()
    assert len(rows) == 1 + 30 and "nnunet-lz4hc5-shuffle" in "".join(rows)
    rec = yaml.safe_load((tmp_path / "tune" / "recommended.yaml").read_text())
    assert rec["patch"] == [16, 32, 32] and rec["codec"] in {"lz4", "lz4hc", "zstd"}
    code, _, err = cli("task", "compress", "--params", tmp_path / "tune" / "recommended.yaml", "--executor", "sync",
                       "--set", f"input={tmp_path / 'sample.npy'}", "--set", f"output={tmp_path / 'out'}")
    assert code == 0, err
    assert open_patches(tmp_path / "out" / "sample.b2nd").meta["codec"] == rec["codec"]


def test_open_patches_slices_like_numpy(tmp_path):
    """The box fast path (blosc2's C slicer) and the general path agree with numpy indexing."""
    data = volume((2, 23, 31, 17), "uint16")
    arr = blosc2.asarray(data, chunks=(1, 8, 16, 16), blocks=(1, 4, 8, 8), urlpath=str(tmp_path / "a.b2nd"), mode="w")
    del arr
    arr = open_patches(tmp_path / "a.b2nd")
    assert arr._slice_into is not None, "blosc2's slice-into-buffer is gone: open_patches is 2-4x slower"
    keys = [(slice(None),), (0,), (-1, slice(3, 9)), (1, slice(-5, None), slice(2, 40), 7),
            (slice(None), slice(0, 23), slice(30, 31), slice(0, 17)), (np.int64(1), 0, slice(1, 2)),
            (slice(None), slice(5, 5)), (slice(None), slice(0, 10, 2)), (Ellipsis, 3)]
    rng = np.random.default_rng(0)
    for _ in range(50):
        lo = [int(rng.integers(0, n)) for n in data.shape]
        keys.append(tuple(slice(a, a + int(rng.integers(1, 12))) for a in lo))
    for key in keys:
        np.testing.assert_array_equal(arr[key], data[key], err_msg=str(key))


def test_min_ratio_picks_the_fastest_patch_read_at_that_ratio(cli, tmp_path):
    """min_ratio: codec x block shape by decode GB/s / over-read among candidates of that ratio;
    the file has the chosen codec and blocks, and patches read back equal the source."""
    data = volume((1, 40, 64, 64), "uint16")
    np.save(tmp_path / "v.npy", data)

    def run(out, min_ratio):
        code, _, err = compress(cli, f"input={tmp_path / 'v.npy'}", f"output={tmp_path / out}", "patch=[16,32,32]",
                                f"min_ratio={min_ratio}")
        assert code == 0, err
        return json.loads((tmp_path / out / "zarrmill" / "compress.json").read_text())["codec"]

    first = run("a", 1.01)
    fastest = max(first["trial"], key=lambda t: t["decompress_gbs"] / t["over_read"])
    above = [t["ratio"] for t in first["trial"] if t["ratio"] > fastest["ratio"]]
    assert above, "no candidate compresses better than the fastest: the test cannot tell min_ratio apart"
    floor = fastest["ratio"] + 1e-3
    choice = run("b", floor)
    assert len({tuple(t["blocks"]) for t in choice["trial"]}) > 1, "block shapes were not tried"
    assert "shuffle+bytedelta" in {t["filter"] for t in choice["trial"]}
    ok = [t for t in choice["trial"] if t["ratio"] >= floor]
    best = max(ok, key=lambda t: (t["decompress_gbs"] / t["over_read"], t["ratio"]))
    assert "ratio >= " in choice["chosen_by"]
    assert (choice["codec"], choice["clevel"], choice["filter"]) == (best["codec"], best["clevel"], best["filter"])
    plain = blosc2.open(str(tmp_path / "b" / "v.b2nd"), mode="r", mmap_mode="r")
    assert list(plain.blocks) == best["blocks"] == choice["blocks"]
    arr = open_patches(tmp_path / "b" / "v.b2nd")
    rng = np.random.default_rng(1)
    for _ in range(20):
        o = [int(rng.integers(0, s - p + 1)) for s, p in zip(data.shape[1:], (16, 32, 32))]
        key = (0, *(slice(a, a + p) for a, p in zip(o, (16, 32, 32))))
        np.testing.assert_array_equal(arr[key], data[key])
    code, _, err = compress(cli, f"input={tmp_path / 'v.npy'}", f"output={tmp_path / 'c'}", "patch=[16,32,32]",
                            "min_ratio=90")
    assert code == 2 and "no lossless candidate reaches min_ratio 90" in err, err
    assert not list((tmp_path / "c").glob("*.b2nd"))


@pytest.mark.parametrize("kind", ["b2nd", "zarr"])
def test_read_batch_equals_numpy_patches(tmp_path, kind):
    """read_batch: every patch equals the source's box, written into a given batch array in place."""
    data = volume((2, 23, 31, 17), "uint16")
    if kind == "b2nd":
        path = tmp_path / "a.b2nd"
        written = blosc2.asarray(data, chunks=(1, 8, 16, 16), blocks=(1, 4, 8, 8), urlpath=str(path), mode="w")
        del written  # closed before it is opened for reading
    else:
        path = tmp_path / "a.zarr"
        zarr.open_array(str(path), mode="w", shape=data.shape, chunks=(1, 8, 16, 16), dtype=data.dtype)[:] = data
    arr = open_patches(path)
    rng = np.random.default_rng(2)
    size = (5, 9, 7)
    origins = [[int(rng.integers(0, s - k + 1)) for s, k in zip(data.shape[1:], size)] for _ in range(12)]
    out = np.full((12, 2, *size), 7, np.uint16)
    got = arr.read_batch(origins, size, out=out)
    assert got is out
    for i, o in enumerate(origins):
        np.testing.assert_array_equal(out[i], data[(slice(None), *(slice(a, a + k) for a, k in zip(o, size)))])
    np.testing.assert_array_equal(arr.read_batch(origins[:3], size), out[:3])
    with pytest.raises(IndexError):
        arr.read_batch([[0, 0, 11]], size)
    with pytest.raises(ValueError):
        arr.read_batch(origins, size, out=np.empty((12, 2, 5, 9, 6), np.uint16))


def test_bytedelta_filter_by_hand_and_what_zarr_refuses(cli, tmp_path):
    data = volume((1, 20, 32, 32), "uint16")
    code, _, err = compress_saved(cli, tmp_path, data, "a", "patch=[8,16,16]", "codec=zstd", "filter=shuffle+bytedelta")
    assert code == 0, err
    arr = blosc2.open(str(tmp_path / "a" / "v.b2nd"), mode="r")
    assert list(arr.schunk.cparams.filters[:2]) == [blosc2.Filter.SHUFFLE, blosc2.Filter.BYTEDELTA]
    np.testing.assert_array_equal(arr[...], data)
    for sets, says in ((["format=zarr", "codec=zstd", "filter=shuffle+bytedelta"], "is for format b2nd"),
                       (["format=zarr", "min_ratio=2"], "min_ratio needs codec auto and format b2nd"),
                       (["codec=lz4", "min_ratio=2"], "min_ratio needs codec auto and format b2nd")):
        code, _, err = compress(cli, f"input={tmp_path / 'v.npy'}", f"output={tmp_path / 'z.zarr'}", "patch=[8,16,16]",
                                *sets)
        assert code == 2 and says in err, (sets, err)
        assert not (tmp_path / "z.zarr").exists()  # refused before anything is written


def test_a_rerun_keeps_the_codecs_its_trial_chose(cli, tmp_path):
    """The codec trial is timed, so a rerun could choose otherwise than the run whose cases are
    already written: a rerun of the same trial (same parameters and cases) takes the choices saved
    in the set's summary. A run is killed as the ledger allows (cases written, their records not
    yet flushed: they are redone), its saved choice made one no trial picks (zlib 1, no filter);
    the rerun writes the cases with the saved codec."""
    from conftest import bookkeeping

    data = volume((30, 40, 50), "uint16")
    code, _, err = compress_saved(cli, tmp_path, data, "out", "patch=[16,16,16]")
    assert code == 0, err
    summary_path = tmp_path / "out" / "zarrmill" / "compress.json"
    summary = json.loads(summary_path.read_text())
    saved = {"codec": "zlib", "clevel": 1, "filter": "nofilter", "chosen_by": "an earlier trial"}
    summary["codecs"] = {dtype: {**choice, **saved} for dtype, choice in summary["codecs"].items()}
    summary_path.write_text(json.dumps({**summary, "state": "running"}))
    for step in (bookkeeping(tmp_path / "out") / "steps").iterdir():  # as a kill before the flush leaves it
        for record in (step / "done").iterdir():
            record.unlink()
        doc = json.loads((step / "step.json").read_text())
        (step / "step.json").write_text(json.dumps({**doc, "state": "running"}))
    code, _, err = compress(cli, f"input={tmp_path / 'v.npy'}", f"output={tmp_path / 'out'}", "patch=[16,16,16]")
    assert code == 0, err
    written = blosc2.open(str(tmp_path / "out" / "v.b2nd"), mode="r")
    assert written.schunk.cparams.codec == blosc2.Codec.ZLIB and written.schunk.cparams.clevel == 1
    np.testing.assert_array_equal(written[...], data)
    # the case rewritten in place (same name, shape and dtype): a new trial, not the saved choice
    other = volume((30, 40, 50), "uint16", seed=5)
    np.save(tmp_path / "v.npy", other)
    code, _, err = compress(cli, f"input={tmp_path / 'v.npy'}", f"output={tmp_path / 'out'}", "patch=[16,16,16]")
    assert code == 0, err
    written = blosc2.open(str(tmp_path / "out" / "v.b2nd"), mode="r")
    assert written.schunk.cparams.codec != blosc2.Codec.ZLIB
    np.testing.assert_array_equal(written[...], other)
