"""zarrmill follow against an acquisition played back at an instrument's pace (issue 52).

  python tests/bench/bench_follow.py [--wells 12] [--grid 3 3] [--shape 2048 2048] [--rate 200]

A synthetic CellVoyager measurement (uint16 planes, 2 channels, 2 z) is played back into a folder
at ``--rate`` MB/s of image files (io/synthetic/playback.py: a plane file, then its mlf record) while
``zarrmill follow`` converts it. Printed side by side:

- latency: for each well, seconds from its last plane's record to the well listed in the plate
  (goal <= 10 s on 2 cores);
- keeping up: the median delay of the first and of the second half of the wells (a follower that
  falls behind makes later wells wait longer and longer), and how long after the end the plate was done;
- the finished plate's time from the end of the acquisition vs a one-shot ingest of the complete
  folder, and the follower's total conversion time vs the one-shot's (goal <= 1.2x);
- peak RSS of the follower and of the one-shot (bytes written are the same plate)."""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from zarrmill.io.synthetic.playback import play_cellvoyager
from zarrmill.runtime.front.commands import run_single_task

ROWS = "BCDEFG"


def wells(n: int) -> list[str]:
    return [f"{ROWS[i // 10]}{i % 10 + 2:02d}" for i in range(n)]


def listed(root: Path) -> list[str]:
    try:
        return [w["path"] for w in json.loads((root / "zarr.json").read_text())["attributes"]["ome"]["plate"]["wells"]]
    except (OSError, KeyError, ValueError):
        return []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wells", type=int, default=12)
    ap.add_argument("--grid", type=int, nargs=2, default=[3, 3])
    ap.add_argument("--shape", type=int, nargs=2, default=[2048, 2048])
    ap.add_argument("--rate", type=float, default=200.0, help="MB/s of image files the instrument writes")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        tmp = Path(tmp)
        raw = tmp / "raw"
        run_single_task("generate-plate", {"output": str(raw), "format": "cellvoyager", "wells": wells(args.wells),
                                           "grid": args.grid, "shape": args.shape, "channels": 2, "z_planes": 2,
                                           "blobs_per_field": 20}, "sync", False)
        raw_mb = sum(f.stat().st_size for f in raw.glob("*.tif")) / 1e6
        live, out = tmp / "live", tmp / "plate.ome.zarr"
        well_done: dict[str, float] = {}  # well path -> time of its last record

        def on_record(n: int, names=list(wells(args.wells))) -> None:
            text = (live / "MeasurementData.mlf").read_bytes()
            last = text.rsplit(b"_T0001", 1)[0].rsplit(b"_", 1)[-1].decode()
            well_done[f"{last[0]}/{last[1:]}"] = time.monotonic()

        player = threading.Thread(target=play_cellvoyager, args=(raw, live),
                                  kwargs={"mb_per_s": args.rate, "on_record": on_record})
        t0 = time.monotonic()
        player.start()
        while not (live / "MeasurementData.mlf").exists():
            time.sleep(0.01)
        follower = subprocess.Popen(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "zarrmill", "follow",
                                     "--set", f"input={live}", "--set", f"output={out}", "--poll", "1",
                                     "--settle", "1"], stderr=subprocess.PIPE, text=True)
        appeared: dict[str, float] = {}
        while follower.poll() is None:
            for w in listed(out):
                appeared.setdefault(w, time.monotonic())
            time.sleep(0.05)
        player.join()
        t_end = max(well_done.values())
        t_done = time.monotonic()
        err = follower.stderr.read()
        follow_rss = int(err.strip().splitlines()[-1]) / 1024
        for w in listed(out):
            appeared.setdefault(w, t_done)
        delays = [appeared[w] - well_done[w] for w in well_done if w in appeared]
        during = [w for w in well_done if appeared.get(w, t_done) < t_end]
        started = time.monotonic()
        one = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "zarrmill", "task", "ingest",
                              "--set", f"input={live}", "--set", f"output={tmp / 'oneshot.ome.zarr'}"],
                             capture_output=True, text=True)
        one_s = time.monotonic() - started
        one_rss = int(one.stderr.strip().splitlines()[-1]) / 1024
        print(f"acquisition: {args.wells} wells x {args.grid[0] * args.grid[1]} fields, {raw_mb:.0f} MB of planes "
              f"played at {args.rate:g} MB/s in {t_end - t0:.1f} s")
        print(f"{'':34s}{'follow':>12s}{'one-shot':>12s}")
        print(f"{'well last plane -> listed, median':34s}{sorted(delays)[len(delays) // 2]:11.1f}s{'':>12s}")
        print(f"{'well last plane -> listed, worst':34s}{max(delays):11.1f}s{'':>12s}")
        print(f"{'wells listed before the end':34s}{len(during):>12d}{'':>12s}")
        print(f"{'plate done after the end':34s}{t_done - t_end:11.1f}s{one_s:11.1f}s")
        print(f"{'peak RSS':34s}{follow_rss:10.0f}MB{one_rss:10.0f}MB")
        # keeping up: the delay does not grow as the acquisition goes on (a follower that falls behind
        # shows later wells waiting longer and longer)
        in_order = [appeared[w] - well_done[w] for w in sorted(well_done, key=well_done.get) if w in appeared]
        half = len(in_order) // 2
        early, late = sorted(in_order[:half])[half // 2], sorted(in_order[half:])[(len(in_order) - half) // 2]
        print(f"{'delay, first half of the wells':34s}{early:11.1f}s\n{'delay, second half':34s}{late:11.1f}s")
        print(f"keeps up at {args.rate:g} MB/s: {'yes' if late <= early + 2 else 'no'} (the delay "
              f"{'does not grow' if late <= early + 2 else 'grows'}); finished plate "
              f"{(t_done - t_end) / one_s:.2f}x the one-shot conversion's time, counted from the end of the acquisition")


if __name__ == "__main__":
    main()
