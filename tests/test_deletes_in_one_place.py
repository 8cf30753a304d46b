"""Every delete, rename and replace in the package goes through the guard: a walk of the source
(AST) finds each call that removes or renames a file, a folder or an object, and fails on any
outside the guard's own modules. A new delete elsewhere fails here until it goes through
``zarrmill.io.storage.guard_fs`` (on disk) or the guard's bucket deletes."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tasks"
# the guard's hands: the only modules that call the file system's or the bucket's deletes
GUARD = {"io/storage/guard_fs.py", "io/storage/guard_empty.py"}
# (module, function) -> why it may call a delete itself
ALLOWED = {
    ("io/storage/object_store.py", "delete_keys"): "the S3 DeleteObjects request itself, called only by the "
                                                    "guard's bucket place and the bucket backend (checked below)",
    ("io/storage/prefixed_store.py", "delete"): "zarr's Store.delete handed to the store under an output prefix: "
                                                 "zarr calls it only for nodes of a store the guard opened to write",
    ("io/storage/prefixed_store.py", "delete_dir"): "the same, for zarr's delete of a node's prefix",
}
ALWAYS = {"rmtree", "unlink", "rmdir", "removedirs", "delete_objects", "delete_object", "rm_file", "_rm"}
ON_MODULE = {("os", "remove"), ("os", "rename"), ("os", "replace"), ("os", "renames"), ("shutil", "move"),
             ("os", "unlink"), ("os", "rmdir")}
S3_DELETES = {"delete_objects", "deleteobjects", "delete_object", "deleteobject"}


def _deletes(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, enclosing function, call) of each delete-like call."""
    out: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Call):
                what = _delete_call(child)
                if what:
                    out.append((child.lineno, func, what))
            visit(child, name)

    visit(tree, "<module>")
    return out


def _delete_call(call: ast.Call) -> str | None:
    f = call.func
    if any(k.arg == "overwrite" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords):
        return "a call with overwrite=True (the library deletes what stands there, unasked)"
    strings = [a.value.lower() for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if any(s in S3_DELETES for s in strings):
        return f"a {strings[0]} request"
    if isinstance(f, ast.Name):
        return f.id if f.id in ALWAYS or f.id in ("rename", "replace") and len(call.args) == 2 else None
    if not isinstance(f, ast.Attribute):
        return None
    owner = f.value.id if isinstance(f.value, ast.Name) else None
    if f.attr in ALWAYS or (owner, f.attr) in ON_MODULE:
        return f"{owner or '…'}.{f.attr}"
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    if f.attr in ("rename", "replace") and len(positional) == 1 and not call.keywords:  # Path.rename/replace
        return f"….{f.attr}(target)"  # (str.replace takes two arguments)
    if f.attr in ("rm", "mv"):
        return f"….{f.attr}"  # fsspec's delete and move
    if f.attr in ("delete", "delete_dir") and isinstance(f.value, ast.Attribute) and f.value.attr in ("_store", "store"):
        return f"….{f.value.attr}.{f.attr}"  # a zarr store's delete
    return None


def _aliased_deletes(tree: ast.AST) -> list[tuple[int, str, str]]:
    """``from os import remove`` (or ``shutil``'s, renamed or not): a delete by another name."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil"):
            out += [(node.lineno, "<module>", f"from {node.module} import {a.name}") for a in node.names
                    if (node.module, a.name) in ON_MODULE or a.name in ALWAYS]
    return out


def _offenders() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in GUARD:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for line, func, what in _deletes(tree) + _aliased_deletes(tree):
            if (rel, func) not in ALLOWED:
                found.append(f"tasks/{rel}:{line} in {func}(): {what}")
    return found


def test_every_delete_and_rename_goes_through_the_guard():
    offenders = _offenders()
    assert not offenders, "deletes outside the guard (use zarrmill.io.storage.guard_fs):\n" + "\n".join(offenders)


def test_the_bucket_delete_is_called_only_by_the_guard():
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name == "delete_keys":
                    callers.append(rel)
    assert set(callers) <= {"io/storage/place_bucket.py", "io/storage/backend.py"}, callers


@pytest.mark.parametrize("source, caught", [
    ("import shutil\nshutil.rmtree(p)\n", True),
    ("from pathlib import Path\nPath(p).unlink()\n", True),
    ("import os\nos.remove(p)\n", True),
    ("import os\nos.replace(a, b)\n", True),
    ("p.rename(q)\n", True),
    ("fs.call_s3('delete_objects', Bucket=b)\n", True),
    ("fs.rm(path, recursive=True)\n", True),
    ("await self._store.delete(key)\n", True),
    ("text.replace('a', 'b')\n", False),
    ("items.remove(x)\n", False),
    ("guard.remove(path)\n", False),
])
def test_the_walk_catches_what_it_must(source, caught):
    """A mutant check of the walk itself: each way of deleting is seen, ordinary calls are not."""
    assert bool(_deletes(ast.parse(source))) is caught
