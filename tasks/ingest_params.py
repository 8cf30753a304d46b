"""The parameters of ``ingest`` (``zarrmill tasks ingest`` lists them), in a module of their own so
that ``ingest`` and ``ingest_wells`` both use them without importing each other."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, model_validator

from .errors import ConfigError, InputNotFoundError
from .io.storage.arrays import PLATE_CODEC, VOLUME_CODEC, Codec
from .io.readers.registry import PLATE_READERS, detect
from .io.ngff.metadata import NgffVersion
from .io.ngff.placement import Policy
from .reshard import ImageName
from .runtime.core.contract import (MAX_COUNT, MAX_INDEX, MAX_MB, PlateShape, PositiveFloat, PositiveInt,
                               TaskParams)


class Params(TaskParams):
    OBJECT_STORES = True  # output may be s3://bucket/prefix; instrument folders are read locally
    LOCAL_FIELDS = ("input",)

    input: str = Field(description="instrument folder, folder of pattern-named files, or one image file (local)")
    output: str = Field(description="OME-Zarr plate (or image, for format=image) to write: a local path or "
                        "s3://bucket/prefix")
    format: Literal["auto", "cellvoyager", "cq", "imagexpress", "metaxpress", "hcsai", "operetta", "scanr", "pattern",
                    "scenes", "image"] = Field(
        "auto", description="auto: `pattern` given is pattern; a folder is the one instrument whose marker files are "
        "there (up to 3 levels down): .mlf + CV mrf cellvoyager, .mlf + CQ mrf cq, .HTD imagexpress, MetaXpress-named "
        "TIFFs without .HTD metaxpress, experiment/*.jdce hcsai, Index(.idx).xml operetta, data/metadata.ome.xml scanr; "
        "a file is scenes (a plate of its scenes, through bioio) if it is CZI/ND2/LIF/... or an OME-TIFF of several "
        "series, else image")
    mlf: str | None = Field(None, description="cellvoyager, cq: mlf file name (default MeasurementData.mlf)")
    mrf: str | None = Field(None, description="cellvoyager, cq: mrf file name (default MeasurementDetail.mrf)")
    pattern: str | None = Field(None, description="pattern: e.g. '{plate}_{well}_s{field}_w{channel}.tif'")
    positions: str | None = Field(None, description="pattern: CSV with well,field,x,y[,z] in micrometer")
    grid_columns: int | None = Field(None, ge=1, le=MAX_COUNT, description="pattern without positions: fields per grid row (default: square)")
    pixel_size: list[PositiveFloat] | None = Field(None, description="[y, x] or [z, y, x] micrometer: overrides what the "
                                                   "files or metadata say (any format)")
    plate_shape: PlateShape = Field([8, 12], description="pattern, metaxpress, hcsai, scanr (formats that record no plate "
                                    "format): plate rows, columns (each at most 72; a 3456-well plate is 48 x 72)")
    channel_names: list[str] | None = Field(None, description="channel labels in channel order")
    axes: str | None = Field(None, description="image: axes of the file (e.g. 'zcyx'), when it does not say")
    missing: Literal["error", "zeros"] = Field("error", description="planes listed but missing on disk: error, or zeros (recorded in metadata)")
    allow_extra_files: bool = Field(False, description="instrument folders: accept image files the metadata does not list")
    check_headers: bool = Field(True, description="read every file header on the driver to catch mixed shapes early")
    ngff_version: NgffVersion = Field("0.5", description="OME-Zarr version: 0.5 (zarr v3), 0.4 (zarr v2, for readers"
                                                         " without zarr v3) or 0.6 (0.6rc0: coordinate systems; each"
                                                         " field placed in its well's scene by a translation from "
                                                         "its stage position)")
    chunk_yx: list[PositiveInt] | None = Field(None, min_length=2, max_length=2, description="chunk tile [y, x] (default: even split, <= 1280)")
    codec: Codec | None = Field(None, description="Blosc codec of every array written; default by job shape: "
                                "plates and series zstd 1 + byte shuffle, a single volume LZ4 5 + bitshuffle (manual: "
                                "Performance: codec)")
    projections: Literal["skip", "only"] = Field("skip", description="imagexpress, metaxpress, cq, hcsai: z projections "
                                                  "the instrument wrote beside the stacks: skip them where a channel has "
                                                  "its stack, or ingest only them (a plate of 2D projections, its own "
                                                  "output; ingest twice for both)")
    well_names: Literal["plate", "fractal"] = Field("plate", description="1536-well plates: plate = rows A..AF, "
                                                     "columns 01..48; fractal = as Fractal names them (B03.a1 -> Ba/031)")
    layout: Literal["fov", "well"] = Field("fov", description="plates: fov = one image per field of view; well = "
                                           "each well one image, its FOVs placed by stage position (what "
                                           "ingest + reshard make, in one pass, with pyramid and ROI tables)")
    pyramid: bool = Field(False, description="layout fov and single images: also write the pyramid levels in the same "
                          "pass, each unit downsampling the region it holds (level 0 never read back); layout well "
                          "always does; the pyramid task adds levels to stores that exist")
    # layout: well (and pyramid); the same settings as reshard's
    image_name: ImageName = Field("well", description="layout well: name of the well image")
    overlap: Policy = Field("first", description="layout well: overlapping FOV pixels: first, last, mean, or shift apart")
    min_size: int = Field(256, ge=1, le=MAX_INDEX, description="layout well, pyramid: the pyramid stops once a level's largest side is at most this")
    shard_mb: float = Field(64.0, gt=0, le=MAX_MB, description="layout well: shard size of the lower pyramid levels")
    overview: bool = Field(False, description="layout well: also write a plate overview image")
    overview_size: int = Field(256, ge=16, le=65_536, description="layout well: about this many overview pixels per well side")
    volume_mb: float = Field(192.0, ge=0, le=MAX_MB, description="layout well: a well's (t, c) volume up to this is built whole "
                             "in one unit, its pyramid in memory; larger ones in regions, lower levels read back; "
                             "pyramid: levels are built in memory while the region that needs is at most this")

    _format: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _check(self) -> "Params":
        if self.format == "pattern" and not self.pattern:
            raise ValueError("format 'pattern' needs pattern, e.g. '{well}_s{field}_w{channel}.tif'")
        if self.layout == "well" and self.format == "image":
            raise ValueError("layout 'well' is for plates; format 'image' writes one image")
        return self

    def pixel_size_override(self) -> tuple[tuple[float, float] | None, float | None]:
        """(y, x) and z step from ``pixel_size``, None where the files' own metadata should say."""
        if not self.pixel_size:
            return None, None
        z = self.pixel_size[0] if len(self.pixel_size) == 3 else None
        return (self.pixel_size[-2], self.pixel_size[-1]), z

    def chosen_codec(self) -> Codec:
        """``codec``, else the default for this job's shape: plates and series are archived and
        moved (zstd 1 + byte shuffle in 1 MiB blocks: 13 % fewer bytes than LZ4 on the plate
        benchmark, fewer than faim-ipa writes); a single volume is converted for analysis right
        away (LZ4 5 + bitshuffle: 0.5-0.8 s faster on the 537 MB volume). manual: Performance."""
        if self.codec is not None:
            return self.codec
        return (VOLUME_CODEC if self.resolved_format() == "image" else PLATE_CODEC).model_copy()

    def resolved_format(self) -> str:
        if self.format != "auto":
            return self.format
        if self._format is None:  # plan, checks and finish all ask: look through the folders once
            self._format = self._detect_format()
        return self._format

    def _detect_format(self) -> str:
        path = Path(self.input)
        if not path.exists():
            raise InputNotFoundError(f"{self.input}: input does not exist")
        if path.is_file():
            return detect(path) or "image"
        if self.pattern:
            return "pattern"
        found = detect(path)
        if found is None:
            raise ConfigError(f"{self.input}: cannot tell the input format; set format (cellvoyager, cq, imagexpress, metaxpress, hcsai, operetta, scanr, pattern, scenes, image)")
        return found


# reader-specific options (registry.PlateReader.options), and those of the readers not listed there
READER_OPTIONS = frozenset().union(*(r.options for r in PLATE_READERS)) | {"pattern", "positions", "grid_columns", "axes"}
PATTERN_OPTIONS = {"pattern": frozenset({"pattern", "positions", "grid_columns", "plate_shape"}),
                   "image": frozenset({"axes"})}


def refuse_foreign_options(p: Params, fmt: str, takes: frozenset[str]) -> None:
    """An option set for another format would be silently ignored: one line instead."""
    given = [name for name in sorted(READER_OPTIONS - takes) if name in p.model_fields_set
             and getattr(p, name) not in (None, "skip")]
    if given:
        owners = {name: "/".join([r.format for r in PLATE_READERS if name in r.options]
                                 + [f for f, opts in PATTERN_OPTIONS.items() if name in opts]) for name in given}
        said = ", ".join(f"{n} is for {owners[n]}" for n in given)
        raise ConfigError(f"{p.input}: {said}; this input is {fmt} "
                          f"(remove {'it' if len(given) == 1 else 'them'})")
