"""A chunk a unit could not decode: the store it read is damaged, said as one line naming it.

zarr-python decodes a read's chunks as one batch and its codecs say only "error during blosc
decompression: -1"; which store (and array) the read came from is in the traceback, in the frame
that reads the selection (its ``store_path``). The unit's failure line then names that array and
what to do, instead of the codec's words alone."""
from __future__ import annotations

import re

DECODE_WORDS = re.compile(r"decompress|decod|corrupt|invalid (compressed|block|frame)|unexpected end of (data|stream)",
                          re.IGNORECASE)


def damaged_store(err: BaseException) -> str | None:
    """The store path (``file://...``, ``s3://...``) of the read that failed decoding a chunk, or
    None when ``err`` is no decoding error of a zarr read."""
    if not isinstance(err, (RuntimeError, ValueError)) or not DECODE_WORDS.search(str(err)):
        return None
    found = None
    tb = err.__traceback__
    while tb is not None:
        for value in list(tb.tb_frame.f_locals.values()):
            if type(value).__name__ == "StorePath":  # zarr's own: the array a read selects from
                found = str(value)
        tb = tb.tb_next
    return found


def damaged_line(err: BaseException) -> str | None:
    """The failure's words when a unit met a chunk it cannot decode; None for any other error."""
    where = damaged_store(err)
    if where is None:
        return None
    return (f"{where}: a chunk of this array cannot be decoded ({type(err).__name__}: {err}); the stored data is "
            "damaged: rewrite that store (rerun the step that made it with --overwrite), then rerun")
