"""Workers kept across steps: worker jobs submitted and time per workflow, with and without reuse.

  python tests/bench/bench_pools.py [--scheduler sge|slurm] [--queue all.q]

A three-step workflow (generate 2GB, rechunk and pyramid 1GB and 5 minutes) on one worker job per
pool, once with ``executor.reuse_workers: true`` (the default: rechunk and pyramid run on the
running workers of generate's pool) and once with ``false`` (each distinct resources queue their
own jobs, as before). Counts the worker jobs the scheduler saw (polled every 0.2 s) and the wall
time of each run; the difference is the queue waits and worker start-ups saved."""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from measure import run_measured, table, zarrmill  # noqa: E402


def jobs(scheduler: str, name: str) -> set[str]:
    if scheduler == "slurm":
        out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True).stdout
        return set(out.split())
    out = subprocess.run(["qstat", "-u", "*", "-xml"], capture_output=True, text=True).stdout
    try:
        root = ET.fromstring(out)
    except ET.ParseError:
        return set()
    return {j.findtext("JB_job_number", "") for j in root.iter("job_list") if j.findtext("JB_name") == name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scheduler", default="sge", choices=["sge", "slurm"])
    ap.add_argument("--queue", default=None, help="queue or partition (default: all.q / debug)")
    args = ap.parse_args()
    queue = args.queue or {"sge": "all.q", "slurm": "debug"}[args.scheduler]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-pools-") as tmp:
        for reuse in (False, True):
            root = Path(tmp) / f"reuse-{reuse}"
            name = f"pools-{str(reuse).lower()}"
            steps = {
                "gen": {"task": "generate", "resources": {"memory": "2GB"},
                        "params": {"output": str(root / "a.zarr"), "shape": [2, 16, 256, 256], "axes": "czyx"}},
                "copy": {"task": "rechunk", "needs": ["gen"], "resources": {"memory": "1GB", "walltime": "00:05:00"},
                         "params": {"input": str(root / "a.zarr"), "output": str(root / "b.zarr"),
                                    "chunks": [1, 8, 64, 64]}},
                "levels": {"task": "pyramid", "needs": ["copy"], "resources": {"memory": "1GB", "walltime": "00:05:00"},
                           "params": {"input": str(root / "b.zarr"), "min_size": 32}}}
            executor = {"kind": args.scheduler, "jobs": 1, "reuse_workers": reuse, "run_dir": str(root / "run"),
                        args.scheduler: {"queue": queue, "cores": 1, "memory": "2GB", "processes": 1,
                                         "walltime": "00:30:00", "interface": "lo"}}
            wf = root / "wf.yaml"
            root.mkdir(parents=True)
            wf.write_text(yaml.safe_dump({"name": name, "executor": executor, "steps": steps}, sort_keys=False))
            seen: set[str] = set()
            stop = threading.Event()

            def watch(name: str = name, seen: set[str] = seen) -> None:
                while not stop.is_set():
                    seen.update(jobs(args.scheduler, f"zm-{name}"))
                    time.sleep(0.2)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            measured = run_measured(zarrmill("run", str(wf)))
            stop.set()
            watcher.join()
            rows.append((f"reuse_workers: {str(reuse).lower()}", len(seen), round(measured.seconds, 1)))
    print(f"\n3 steps (2GB; 1GB + 5 min; 1GB + 5 min) on {args.scheduler}, one worker job per pool")
    print(table(rows, ("run", "worker jobs", "s")))


if __name__ == "__main__":
    main()
