"""A plan declares the output's groups and arrays (io/storage/nodes.py); the step creates them once
the plan is whole and fits the budget (a refused one: tests/test_budget.py). So while a task plans,
its output holds nothing but the claim it was given."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile

import zarrmill.ingest as ingest
import zarrmill.pyramid as pyramid

CLAIM = ".zarrmill-claim"


@pytest.fixture
def patch_plan(monkeypatch):
    """Replace a task module's plan for one test (tasks are cached by the registry)."""
    from zarrmill.runtime.execution.registry import get_task

    def patch(module, fn) -> None:
        monkeypatch.setattr(module, "plan", fn)
        get_task.cache_clear()

    yield patch
    get_task.cache_clear()


def _nodes(root: Path) -> list[str]:
    """Zarr nodes (their metadata files) under ``root``."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name in ("zarr.json", ".zarray", ".zgroup"))


def _volume(tmp_path: Path) -> Path:
    src = tmp_path / "v.tif"
    data = np.random.default_rng(1).integers(0, 4000, (8, 300, 260), dtype=np.uint16)
    tifffile.imwrite(src, data, imagej=True, metadata={"axes": "ZYX"})
    return src


def test_an_ingest_plan_writes_no_node_until_it_is_whole(cli, tmp_path, patch_plan):
    src, out = _volume(tmp_path), tmp_path / "v.ome.zarr"
    real, seen = ingest.plan, {}

    def plan_and_look(p, ctx):
        units = real(p, ctx)
        seen["nodes"] = _nodes(out)
        seen["files"] = sorted(q.name for q in out.iterdir())
        seen["declared"] = len(ctx.nodes)
        return units

    patch_plan(ingest, plan_and_look)
    code, _, err = cli("task", "ingest", "--set", f"input={src}", "--set", f"output={out}", "--set", "pyramid=true",
                       "--set", "min_size=64", "--executor", "sync")
    assert code == 0, err
    assert seen["nodes"] == [] and seen["files"] == [CLAIM]  # planned: nothing made yet
    assert seen["declared"] >= 4  # the image's group, level 0 and levels 1..
    made = _nodes(out)
    assert "zarr.json" in made and "0/zarr.json" in made and "2/zarr.json" in made
    assert cli("check", out)[0] == 0


def test_the_pyramid_task_declares_its_levels_and_reads_only_its_input(cli, tmp_path, patch_plan):
    """The pyramid task plans from its stored level 0; the levels appear once the plan is whole."""
    src, img = _volume(tmp_path), tmp_path / "v.ome.zarr"
    assert cli("task", "ingest", "--set", f"input={src}", "--set", f"output={img}", "--executor", "sync")[0] == 0
    real, seen = pyramid.plan, {}

    def plan_and_look(p, ctx):
        units = real(p, ctx)
        seen["nodes"] = _nodes(img)
        return units

    patch_plan(pyramid, plan_and_look)
    code, _, err = cli("task", "pyramid", "--set", f"input={img}", "--set", "min_size=64", "--executor", "sync")
    assert code == 0, err
    assert seen["nodes"] == ["0/zarr.json", "zarr.json"]
    assert "1/zarr.json" in _nodes(img) and cli("check", img)[0] == 0
