"""MkDocs hooks: the reference pages are made from the code at build time (zarrmill.runtime.front.manual),
and each task page is added to the navigation, so a task or parameter added to the code is in the
manual with no edit here."""
from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files


def on_config(config: Any) -> Any:
    from zarrmill.runtime.front.manual import TASKS_DIR, task_pages_nav

    for section in config["nav"]:
        for entries in section.values():
            if isinstance(entries, list):
                for i, entry in enumerate(entries):
                    if isinstance(entry, dict) and entry.get("Tasks") == f"{TASKS_DIR}/index.md":
                        entries[i] = {"Tasks": [f"{TASKS_DIR}/index.md", *task_pages_nav()]}
    return config


def on_files(files: Files, config: Any) -> Files:
    from zarrmill.runtime.front.manual import reference_pages

    for path, text in reference_pages().items():
        files.append(File.generated(config, path, content=text))
    return files
