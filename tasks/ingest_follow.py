"""``zarrmill follow``: ingest of a plate the instrument is still imaging.

The follower polls the acquisition (io/readers/growing.py) and runs the ingest step once per poll
under one lock (runtime/execution/engine.py, ``StepOptions.growing``). Each poll's plan takes the wells that
are ready, and its finish writes their metadata, so every converted well is valid and viewable at
once. The plate's metadata is written last, after the field images it lists (zarr writes each
``zarr.json`` whole, by rename).

A well is ready when every file its records name is there, the instrument has moved on to another
well (the well of the newest record or file is still being imaged), and nothing of it changed for
``settle_seconds``. The step is finished (the whole plate, as a one-shot conversion would write it,
then provenance and "done") when the instrument's end marker appears or nothing has changed for
``quiet_seconds``.

Units carry their well's version (a hash of its records and of each file's size and modification
time): a well whose files change after it was converted (a re-acquired well) gets new unit ids, so
it is redone, and the follower says so in one line. A killed follower reruns to the same plate: the
ledger keeps the units done, under their versions."""
from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np

from .errors import ConfigError, InputError, held_warnings, warn
from .ingest_acquisition import named_acquisition, read_acquisition, validate_files
from .ingest_params import Params
from .io.ngff.acquisition import Acquisition
from .io.readers.growing import GrowingMeasurement, Reread, Snapshot
from .io.readers.registry import ReadOptions
from .io.readers.yokogawa import read_measurement

U = TypeVar("U")  # a task's unit type (a frozen dataclass, runtime/core/units.py: a floor above this one)

FOLLOWED = {"cellvoyager": "the mlf, record by record", "cq": "the mlf, record by record",
            "imagexpress": "the .HTD and well files, re-read", "metaxpress": "the well folders, re-read",
            "hcsai": "the well files, re-read", "operetta": "the Harmony index, re-read",
            "scanr": "the scanR metadata, re-read", "pattern": "the file names, re-read"}


@dataclass(frozen=True)
class FollowSettings:
    poll_seconds: float = 5.0  # how often the acquisition is looked at
    settle_seconds: float = 2.0  # a well unchanged this long (and the instrument elsewhere) is ready
    quiet_seconds: float = 1800.0  # nothing new this long: the acquisition is over (no end marker)


Well = tuple[int, int]


class Follower:
    """The engine's ``growing`` input for one ingest step: the loop and what each poll converts."""

    def __init__(self, p: Params, settings: FollowSettings, say: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        if p.layout != "fov":
            raise ConfigError("follow converts plates with layout fov (one image per field); run reshard on the "
                              "finished plate for layout well")
        self.p, self.settings = p, settings
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.clock, self.sleep = clock, sleep
        self.source = _source(p, self.say)
        self.acquisition: Acquisition | None = None  # this poll's plan converts it
        self.final = False
        self.polls = 0
        self.versions: dict[Well, str] = {}  # this poll's, of the wells in ``acquisition``
        self.converted: dict[Well, str] = {}  # the versions earlier polls converted
        self._seen: dict[Well, tuple[str, float]] = {}  # version as last seen, and since when

    # -- the loop ------------------------------------------------------------------------------
    def follow(self, run_once: Callable[[], object]) -> object:
        last_change = self.clock()
        state = None
        while True:
            snap = self.source.poll()
            now = self.clock()
            acq = snap.acquisition
            versions = _versions(acq) if acq is not None else {}
            if (len(acq.table) if acq is not None else 0, versions) != state:
                state, last_change = (len(acq.table) if acq is not None else 0, versions), now
            quiet = now - last_change >= self.settings.quiet_seconds
            if acq is None and (snap.ended or quiet):
                raise InputError(f"{self.p.input}: nothing to convert "
                                 f"{'(the acquisition ended with no image)' if snap.ended else 'after ' + _duration(self.settings.quiet_seconds)}"
                                 "; check that input names the instrument's measurement folder")
            if acq is not None and (snap.ended or quiet):
                self._say_end(snap.ended)
                return self._run(run_once, self._whole(acq), versions, final=True)
            ready = self._ready(acq, versions, snap.current, now) if acq is not None else {}
            todo = {w: v for w, v in ready.items() if self.converted.get(w) != v}
            if todo:
                for well in sorted(w for w in todo if w in self.converted):
                    self.say(f"[follow] well {_label(acq, well)}: its files changed after it was converted; redoing it")
                report = self._run(run_once, self._subset(acq, ready, todo), ready, final=False)
                if getattr(report, "was_done", False):
                    return report
            self.sleep(self.settings.poll_seconds)

    def _say_end(self, ended: bool) -> None:
        if ended:
            self.say("[follow] the instrument says the acquisition ended: finishing the plate")
        else:
            self.say(f"[follow] nothing new for {_duration(self.settings.quiet_seconds)}: finishing the plate")
            if self.source.has_end_marker:  # an instrument that stopped (a crash, a run cut short) says nothing
                warn(self.p.input, "the instrument has not said the acquisition ended; the plate is finished with the wells imaged so far (run follow or ingest again once it has ended to add the rest)")
        self.say_warnings()

    def _run(self, run_once: Callable[[], object], acq: Acquisition, versions: dict[Well, str],
             final: bool) -> object:
        self.acquisition, self.versions, self.final = acq, versions, final
        self.polls += 1
        report = run_once()
        self.converted.update(versions)
        done = sorted(_label(acq, w) for w in versions)
        if not final:
            self.say(f"[follow] {len(done)} well{'s' if len(done) != 1 else ''} converted and viewable: {_listed(done)}")
        return report

    # -- what a poll converts ------------------------------------------------------------------
    def _ready(self, acq: Acquisition, versions: dict[Well, str], current: Well | None,
               now: float) -> dict[Well, str]:
        present = _present_by_well(acq)
        ready = {}
        for well, version in versions.items():
            seen = self._seen.get(well)
            if seen is None or seen[0] != version:
                self._seen[well] = (version, now)
                continue
            if well != current and present[well] and now - seen[1] >= self.settings.settle_seconds:
                ready[well] = version
        return ready

    def _subset(self, acq: Acquisition, ready: dict[Well, str], todo: dict[Well, str]) -> Acquisition:
        """The ready wells (the plan's units and finish's metadata); the new ones checked as a
        one-shot run checks its input (headers, shapes)."""
        part = _wells_of(acq, set(ready))
        validate_files(self.p, _wells_of(acq, set(todo)))
        return part

    def _whole(self, acq: Acquisition) -> Acquisition:
        """The final poll: the whole acquisition, checked as a one-shot run checks it."""
        validate_files(self.p, acq)
        return acq

    def say_warnings(self) -> None:
        for line in dict.fromkeys(self.source.lines):
            print(line, file=sys.stderr, flush=True)

    def versioned(self, units: list[U], layout: str) -> list[U]:
        """Each unit's id with its well's version and its array's ``layout``: the units of a well
        whose files or array changed are not done."""
        by_prefix = {f"{self.acquisition.row_label(r)}/{self.acquisition.col_label(c)}": v
                     for (r, c), v in self.versions.items()}

        def version(unit: U) -> U:
            prefix = "/".join(unit.id.split("/")[:2])
            digest = hashlib.blake2b(f"{by_prefix.get(prefix, 'plate')}|{layout}".encode(), digest_size=8)
            return replace(unit, id=f"{unit.id}@{digest.hexdigest()}")
        return [version(unit) for unit in units]


def _source(p: Params, say: Callable[[str], None]):
    fmt = p.resolved_format()
    if fmt not in FOLLOWED:
        raise ConfigError(f"{p.input}: {'an' if fmt[0] in 'aeiou' else 'a'} {fmt} input cannot be followed while it is written (one file); convert it "
                          "with zarrmill task ingest once it is complete")
    say(f"[follow] {p.input}: {fmt}, following {FOLLOWED[fmt]}")
    if fmt in ("cellvoyager", "cq"):
        pixel_size, z_step = p.pixel_size_override()
        options = ReadOptions(pixel_size, z_step, mlf=p.mlf, mrf=p.mrf, projections=p.projections == "only")

        def read(folder: Path, records: Callable, **_: object) -> Acquisition:
            acq = read_measurement(folder, options.mlf, options.mrf, options.projections, options.pixel_size_yx,
                                   records=records)
            if options.z_step is not None:
                acq.z_step = options.z_step
            return named_acquisition(p, acq)
        return _Growing(GrowingMeasurement(Path(p.input), read=read), p)
    return _Growing(Reread(lambda: read_acquisition(p)), p)


class _Growing:
    """A source whose snapshots leave out image files no record names yet (written before their
    record): checked once, at the end, as a one-shot run checks them."""

    def __init__(self, source, p: Params):
        self.source, self.p = source, p
        self.last: Acquisition | None = None
        self.lines: list[str] = []  # the warnings of reading ``last``: said once, when the plate is finished
        self.has_end_marker = isinstance(source, GrowingMeasurement)

    def poll(self) -> Snapshot:
        with held_warnings() as lines:
            snap = self.source.poll()
        if snap.acquisition is not self.last:
            # a growing mlf says each ERR record once, when read; a re-read says all again
            self.last, self.lines = snap.acquisition, [*self.lines, *lines] if self.has_end_marker else lines
        if snap.acquisition is None or snap.ended:
            return snap
        return Snapshot(replace(snap.acquisition, planes=snap.acquisition.table, unlisted=[]), snap.ended,
                        snap.current)


def _versions(acq: Acquisition) -> dict[Well, str]:
    """(row, col) -> a hash of the well's records and its files' sizes and modification times."""
    tb = acq.table
    bounds = tb.boundaries("row", "col")
    paths = tb.paths()
    out = {}
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        digest = hashlib.blake2b(digest_size=8)
        for i in range(a, b):
            digest.update(f"{tb.t[i]},{tb.c[i]},{tb.z[i]},{tb.field[i]},{paths[i]},{tb.time(i)};".encode())
            try:
                st = os.stat(paths[i])
                digest.update(f"{st.st_size},{st.st_mtime_ns};".encode())
            except OSError:
                digest.update(b"absent;")
        out[(int(tb.row[a]), int(tb.col[a]))] = digest.hexdigest()
    return out


def _present_by_well(acq: Acquisition) -> dict[Well, bool]:
    tb = acq.table
    bounds = tb.boundaries("row", "col")
    paths = tb.paths()
    return {(int(tb.row[a]), int(tb.col[a])): all(os.path.isfile(paths[i]) for i in range(a, b))
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())}


def _wells_of(acq: Acquisition, wells: set[Well]) -> Acquisition:
    tb = acq.table
    keep = np.array([(int(r), int(c)) in wells for r, c in zip(tb.row.tolist(), tb.col.tolist())], dtype=bool)
    return replace(acq, planes=tb.take(np.flatnonzero(keep)), unlisted=[])


def _label(acq: Acquisition, well: Well) -> str:
    return f"{acq.row_label(well[0])}{acq.col_label(well[1])}"


def _listed(names: list[str], most: int = 8) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"
