"""The manual (docs/, built with MkDocs) and the README: every shell and YAML example runs on small
generated data, the site builds with warnings as errors and no broken internal link, and the
reference pages list every parameter ``zarrmill schema`` lists (a parameter added to a task is
there with no edit to the docs).

How examples are run: a getting-started page (and the README) runs exactly as written, in an empty folder that holds
only the clone's ``workflows/`` (the pages run from the folder you cloned): its own ``zarrmill
sample-data`` lines make its inputs, and nothing else is made for it. Every other page gets a fresh
folder holding the sample data its examples name, made by the same command (``raw/`` and
``incoming/plate1`` the ``plate-cellvoyager`` sample, ``brain.ome.zarr`` and ``cells.xml`` the
``organ-points`` sample, ``cases/`` ``training-cases``, ``nnUNet_preprocessed/``
``nnunet-preprocessed``) and ``workflows/``. A page's code blocks run in page order in its folder,
so a block may use what an earlier one wrote. An HTML comment on the line before a block says how:

- none: a ``bash`` block runs (``set -euo pipefail``: a ``! cmd`` line must fail); a ``yaml`` block
  is saved and checked with ``zarrmill validate``, then run with ``zarrmill run``;
- ``<!-- example: file NAME -->``: a ``yaml`` block is saved as NAME for later blocks, and validated;
- ``<!-- example: cluster -->``: needs a cluster: ``bash -n``; each ``zarrmill run F`` is run as
  ``zarrmill validate F`` then ``zarrmill run F --dry-run``, ``zarrmill submit F`` as ``zarrmill
  validate F``, ``zarrmill task ...`` with ``--executor sync``; a ``yaml`` block is validated and dry-run;
- ``<!-- example: s3 -->``: runs against a real S3 server (moto's, on 127.0.0.1) with its bucket;
- ``<!-- example: setup -->``: sets up this repository (installs, the test suite itself): ``bash -n``,
  the scripts it names exist and ``pip install -e .`` finds the clone's pyproject.toml."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, zarrmill_subprocess

DOCS = REPO / "docs"
GETTING_STARTED = DOCS / "getting-started"
PAGES = sorted(p for p in DOCS.rglob("*.md")) + [REPO / "README.md"]
MARK = re.compile(r"<!--\s*example:\s*(?P<kind>[\w-]+)(?:\s+(?P<arg>\S+))?\s*-->")
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")
BIN = Path(sys.executable).parent
RUN_TIMEOUT = 600


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    text: str
    marks: dict[str, str | None]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    out, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        marks: dict[str, str | None] = {}
        k = i - 1
        while k >= 0 and (m := MARK.search(lines[k])):
            marks[m["kind"]] = m["arg"]
            k -= 1
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        out.append(Block(page, i + 1, fence["lang"], "\n".join(lines[i + 1:end]) + "\n", marks))
        i = end + 1
    return out


def examples(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang in ("bash", "sh", "yaml")]


# -- sample data, made once (for the pages outside getting-started) --------------------------------
@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("samples")
    for name, dest in (("plate-cellvoyager", "raw"), ("plate-cellvoyager", "incoming/plate1"),
                       ("organ-points", "organ"), ("training-cases", "cases"),
                       ("nnunet-preprocessed", "nnUNet_preprocessed")):
        done = zarrmill_subprocess("sample-data", name, root / dest)
        assert done.returncode == 0, done.stderr
    for name in ("brain.ome.zarr", "cells.xml"):
        os.symlink(root / "organ" / name, root / name)
    return root


def _clone_view(where: Path) -> Path:
    """An empty folder with the clone's workflows/, as a page run from the folder you cloned sees it."""
    where.mkdir(parents=True)
    os.symlink(REPO / "workflows", where / "workflows")
    return where


def _sandbox(samples: Path, where: Path) -> Path:
    _clone_view(where)
    for item in samples.iterdir():
        os.symlink(item, where / item.name)
    return where


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    # NO_MKDOCS_2_WARNING: Material's end-of-life notice (May 2027), printed on every build, is not a warning
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "NO_MKDOCS_2_WARNING": "1",
            **(extra or {})}


def _bash(script: str, cwd: Path, env: dict[str, str], where: str) -> None:
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, f"{where}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _cluster_shell(block: Block, cwd: Path, env: dict[str, str]) -> None:
    syntax = subprocess.run(["bash", "-n", "-c", block.text], capture_output=True, text=True)
    assert syntax.returncode == 0, f"{block.where}: {syntax.stderr}"
    checked = 0
    for line in block.text.splitlines():
        words = shlex.split(line, comments=True)
        if len(words) < 3 or words[0] != "zarrmill":
            continue
        if words[1] == "run":
            _bash(shlex.join(["zarrmill", "validate", *_as_sets(words[2:])]), cwd, env, block.where)
            _bash(shlex.join([*words, "--dry-run"]) if "--dry-run" not in words else shlex.join(words),
                  cwd, env, block.where)
        elif words[1] == "submit":
            _bash(shlex.join(["zarrmill", "validate", words[2]]), cwd, env, block.where)
        elif words[1] == "validate":
            _bash(shlex.join(words), cwd, env, block.where)
        elif words[1] == "task":
            kept = [w for i, w in enumerate(words) if w != "--executor" and (i == 0 or words[i - 1] != "--executor")]
            _bash(shlex.join([*kept, "--executor", "sync"]), cwd, env, block.where)
        else:
            continue
        checked += 1
    assert checked, f"{block.where}: a cluster example with no zarrmill command to check"


def _as_sets(args: list[str]) -> list[str]:
    """``run`` arguments as ``validate`` takes them: ``--executor K`` is ``--set executor.kind=K``."""
    out, i = [], 0
    while i < len(args):
        if args[i] == "--executor" and i + 1 < len(args):
            out += ["--set", f"executor.kind={args[i + 1]}"]
            i += 2
            continue
        if args[i] not in ("--dry-run", "--json", "--overwrite"):
            out.append(args[i])
        i += 1
    return out


def _setup_shell(block: Block) -> None:
    syntax = subprocess.run(["bash", "-n", "-c", block.text], capture_output=True, text=True)
    assert syntax.returncode == 0, f"{block.where}: {syntax.stderr}"
    for line in block.text.splitlines():
        words = shlex.split(line, comments=True)
        if len(words) >= 2 and words[0] == "bash":
            assert (REPO / words[1]).is_file(), f"{block.where}: {words[1]} does not exist"
        if "-e" in words and words[words.index("-e") + 1:][:1] == ["."]:
            assert (REPO / "pyproject.toml").is_file(), f"{block.where}: pip install -e . needs the clone's pyproject.toml"


def _yaml(block: Block, cwd: Path, env: dict[str, str], n: int) -> None:
    name = block.marks.get("file") or f"example-{n}.yaml"
    (cwd / name).write_text(block.text)
    _bash(f"zarrmill validate {shlex.quote(name)}", cwd, env, block.where)
    if "cluster" in block.marks:
        _bash(f"zarrmill run {shlex.quote(name)} --dry-run", cwd, env, block.where)
    elif "file" not in block.marks:
        _bash(f"zarrmill run {shlex.quote(name)}", cwd, env, block.where)


def _page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


@pytest.mark.parametrize("page", [p for p in PAGES if examples(p)], ids=_page_id)
def test_every_example_on_the_page_runs(page, tmp_path, request):
    if GETTING_STARTED in page.parents or page == REPO / "README.md":  # as pasted: its own sample-data lines
        cwd = _clone_view(tmp_path / "work")
    else:
        cwd = _sandbox(request.getfixturevalue("samples"), tmp_path / "work")
    env = _env()
    if any("s3" in b.marks for b in examples(page)):
        server = request.getfixturevalue("s3")
        env = _env(server.env())
        for bucket in sorted({m for b in examples(page) for m in re.findall(r"s3://([a-z0-9.-]+)/", b.text)}):
            server.make_bucket(bucket)
    for n, block in enumerate(examples(page)):
        if block.lang == "yaml":
            _yaml(block, cwd, env, n)
        elif "setup" in block.marks:
            _setup_shell(block)
        elif "cluster" in block.marks:
            _cluster_shell(block, cwd, env)
        else:
            _bash(block.text, cwd, env, block.where)


@pytest.mark.parametrize("page", sorted(GETTING_STARTED.glob("*.md")), ids=_page_id)
def test_every_getting_started_page_opens_with_the_install_line_and_its_sample(page):
    install, sample = examples(page)[:2]
    assert "setup" in install.marks and "pip install -e ." in install.text, f"{install.where}: not the install line"
    lines = [line for line in sample.text.splitlines() if line.strip()]
    assert not sample.marks and lines and all(line.startswith("zarrmill sample-data") for line in lines), \
        f"{sample.where}: not the zarrmill sample-data line(s)"


def test_every_page_marks_only_kinds_the_runner_knows():
    for page in PAGES:
        for block in blocks(page):
            unknown = set(block.marks) - {"file", "cluster", "s3", "setup"}
            assert not unknown, f"{block.where}: unknown example kind {unknown}"


# -- the site -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          capture_output=True, text=True, env=_env(), timeout=RUN_TIMEOUT)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    assert "WARNING" not in done.stderr, done.stderr
    return out


def test_the_site_builds_with_warnings_as_errors_and_no_broken_internal_link(site):
    from html.parser import HTMLParser

    class Links(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.links: list[str] = []
            self.ids: set[str] = set()

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found = dict(attrs)
            if found.get("id"):
                self.ids.add(found["id"])
            for key in ("href", "src"):
                if found.get(key):
                    self.links.append(found[key])

    pages: dict[Path, Links] = {}
    for html in site.rglob("*.html"):
        parser = Links()
        parser.feed(html.read_text())
        pages[html] = parser
    broken = []
    for html, parser in pages.items():
        if html.name == "404.html" and html.parent == site:
            continue  # links from the site root, wherever the server puts it
        for link in parser.links:
            if re.match(r"^[a-z]+:", link) or link.startswith("//"):
                continue  # another site (not checked here: CI reaches no other host)
            path, _, anchor = link.partition("#")
            target = (site / path.lstrip("/") if path.startswith("/") else html.parent / path).resolve() if path else html
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{html.relative_to(site)}: {link}")
            elif anchor and target.suffix == ".html" and anchor not in pages[target].ids:
                broken.append(f"{html.relative_to(site)}: {link} (no such anchor)")
    assert not broken, broken[:20]
    assert len(pages) > 20


def test_every_parameter_zarrmill_schema_lists_is_on_the_reference_pages(site):
    schema = json.loads(zarrmill_subprocess("schema").stdout)
    defs = schema["$defs"]
    missing = []
    for key, step in defs.items():
        if not key.startswith("Step_"):
            continue
        task = step["properties"]["task"]["const"]
        params = defs[step["properties"]["params"]["$ref"].split("/")[-1]]["properties"]
        page = (site / "reference" / "tasks" / task / "index.html").read_text()
        missing += [f"{task}.{name}" for name in params if f"<code>{name}</code>" not in page]
    assert not missing, missing


def test_a_parameter_added_to_a_task_is_in_its_reference_page_with_no_edit_to_the_docs(monkeypatch):
    import dataclasses

    from pydantic import Field, create_model

    from zarrmill.runtime.front import manual, schema
    from zarrmill.runtime.execution import registry

    original = registry.get_task
    task = original("rechunk")
    extended = create_model("Params", __base__=task.params_model,
                            brand_new_knob=(int, Field(7, ge=1, le=9, description="a knob added to the code")))
    patched = dataclasses.replace(task, params_model=extended)
    lookup = lambda name: patched if name == "rechunk" else original(name)  # noqa: E731
    monkeypatch.setattr(schema, "get_task", lookup)  # what `zarrmill schema` prints
    monkeypatch.setattr(manual, "get_task", lookup)
    assert "brand_new_knob" in json.dumps(schema.workflow_schema())
    page = manual.reference_pages()["reference/tasks/rechunk.md"]
    row = next(line for line in page.splitlines() if "`brand_new_knob`" in line)
    assert "whole number >= 1 and <= 9" in row and "`7`" in row and "a knob added to the code" in row


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    first = "\n".join(lines[:25])
    assert "bash deploy/demo.sh" in first and "bash tests/run" in first


def test_every_error_class_is_in_troubleshooting():
    import inspect

    from zarrmill import errors

    page = (DOCS / "how-to" / "troubleshooting.md").read_text()
    classes = [n for n, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.ZarrmillError)]
    assert classes and all(f"## {name}" in page for name in classes), classes
