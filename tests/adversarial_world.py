"""A small world of a user's files for adversarial tests: inputs zarrmill did not write, a precious
folder, a home and a current folder, a foreign zarr store, a file, symlinks (a loop, a link out).
Built once, copied per case; ``snapshot`` records every path, its kind, size and content hash, so
a test can assert that nothing outside the output changed."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import zarr
from conftest import forget_ownership

IMAGE_SHAPE = (2, 8, 32, 32)


def build_world(world: Path) -> Path:
    (world / "cwd").mkdir(parents=True)
    (world / "cwd" / "notes.txt").write_text("my notes\n")
    (world / "home").mkdir()
    (world / "home" / ".bashrc").write_text("export LAB=1\n")
    (world / "precious" / "sub").mkdir(parents=True)
    (world / "precious" / "data.bin").write_bytes(np.random.default_rng(1).bytes(2048))
    (world / "precious" / "sub" / "a.txt").write_text("irreplaceable\n")
    (world / "afile.txt").write_text("a file, not a folder\n")
    inputs = world / "in"
    inputs.mkdir()
    _run("generate", f"output={inputs / 'img.zarr'}", f"shape={list(IMAGE_SHAPE)}", "axes=czyx",
         "chunks=[1,4,16,16]", "n_blobs=5", "unit_mb=0.01")
    _run("generate-plate", f"output={inputs / 'raw'}", "wells=[B03]", "grid=[1,2]", "shape=[32,32]",
         "channels=1", "z_planes=2")
    _run("ingest", f"input={inputs / 'raw'}", f"output={inputs / 'plate.zarr'}")
    for store in ("img.zarr", "raw", "plate.zarr"):  # the user's data: not zarrmill's to touch
        forget_ownership(inputs / store)
        (inputs / store / "zarrmill-provenance.json").unlink(missing_ok=True)
    np.save(inputs / "case.npy", np.random.default_rng(2).integers(0, 1000, (1, 16, 32, 32), dtype=np.uint16))
    (inputs / "points.csv").write_text("z,y,x\n4,16,16\n2,8,8\n")
    foreign = zarr.create_array(str(world / "foreign.zarr"), shape=(4, 4), dtype="uint8")
    foreign[:] = 7
    os.symlink("loop2", world / "loop")
    os.symlink("loop", world / "loop2")
    os.symlink("../precious", world / "cwd" / "link_out")  # relative: copies of the world keep it inside
    return world


def _run(task: str, *sets: str) -> None:
    from zarrmill.runtime.front.cli import main

    args = ["task", task, "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0, args


def copy_world(template: Path, dst: Path) -> Path:
    shutil.copytree(template, dst, symlinks=True)
    return dst


def snapshot(root: Path) -> dict[str, str]:
    """relative path -> 'dir' | 'link:<target>' | '<size>:<sha256>', symlinks not followed."""
    out: dict[str, str] = {}
    for dirpath, dirnames, names in os.walk(root):
        for name in dirnames + names:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = f"link:{os.readlink(path)}"
            elif path.is_dir():
                out[rel] = "dir"
            elif not path.is_file():  # a pipe or device: reading it could block
                out[rel] = f"special:{path.stat().st_mode:o}"
            else:
                data = path.read_bytes()
                out[rel] = f"{len(data)}:{hashlib.sha256(data).hexdigest()}"
    return out


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def set_json(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
