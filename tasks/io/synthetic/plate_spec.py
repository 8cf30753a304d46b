"""What ``generate-plate`` writes, whatever the instrument format: one description each format's
writer (one module per format in this package) turns into the files that instrument writes."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from .cellvoyager import FieldSpec, well_rc

# channel names and emission wavelengths (nm) of a typical four-colour screen, then more
CHANNELS = (("DAPI", 455), ("GFP", 525), ("RFP", 600), ("Cy5", 690), ("BF", 0), ("CFP", 475), ("YFP", 540),
            ("mCherry", 610))


@dataclass(frozen=True)
class PlateSpec:
    plate: str
    plate_shape: tuple[int, int]  # rows, columns
    n_c: int
    n_z: int
    z_step: float  # micrometer
    pixel_size: float  # micrometer
    shape: tuple[int, int]  # field image y, x
    dtype: str
    projections: bool  # also write z projections beside the stacks (formats whose instruments do)
    seed: int
    n_t: int = 1  # time points
    wells: tuple[str, ...] = ()  # in the order generate-plate lists them
    sparse: str = "none"  # none | mixed | qc: which channels and time points each well is imaged with
    failed_fields: int = 0  # fields the instrument could not image (the last field of the first wells)
    fields_per_well: int = 1

    @property
    def bit_depth(self) -> int:
        return 8 if self.dtype == "uint8" else 16

    @staticmethod
    def channel(c: int) -> tuple[str, int]:
        """(name, emission nm) of 0-based channel c."""
        return CHANNELS[c % len(CHANNELS)]

    def well_index(self, well: str) -> int:
        """1-based, row by row over the plate (scanR's W, CQ's W numbering)."""
        r, c = well_rc(well)
        return (r - 1) * self.plate_shape[1] + c

    def uuid(self, *parts: object) -> str:
        """A stable UUID per file, so a rerun writes the same names."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, "zarrmill:" + ":".join(map(str, (self.seed, self.plate, *parts))))).upper()

    def channels_of(self, well: str) -> list[int]:
        """0-based channels ``well`` is imaged with: all of them, or (sparse) its own. ``mixed``:
        every other well has one channel of its own; ``qc``: every well one channel (an
        illumination or QC plate, each well its own protocol)."""
        k = self.wells.index(well) if well in self.wells else 0
        if self.sparse == "qc" or (self.sparse == "mixed" and k % 2 == 1):
            return [(k if self.sparse == "qc" else k // 2) % self.n_c]
        return list(range(self.n_c))

    def times_of(self, well: str) -> list[int]:
        """0-based time points ``well`` is imaged at (``qc``: each well its own timeline)."""
        k = self.wells.index(well) if well in self.wells else 0
        if self.sparse == "qc" or (self.sparse == "mixed" and k % 3 == 1):
            return [k % self.n_t]
        return list(range(self.n_t))

    def acquired(self, well: str, t: int, c: int) -> bool:
        return t in self.times_of(well) and c in self.channels_of(well)

    def failed(self, well: str, field: int) -> bool:
        """Whether the instrument failed to image this field (1-based): the last field of each of the
        first ``failed_fields`` wells."""
        k = self.wells.index(well) if well in self.wells else len(self.wells)
        return k < self.failed_fields and field == self.fields_per_well

    def z_um(self, z: int) -> float:
        """Stage z of 0-based plane z (a focus offset the instrument would add drops out of steps)."""
        return round(100.0 + z * self.z_step, 6)


__all__ = ["FieldSpec", "PlateSpec"]
