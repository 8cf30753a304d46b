"""One error hierarchy. The CLI prints any ``ZarrmillError`` as one line (exit 2 for bad input,
1 for a failed run); everything else is a bug and keeps its traceback under ``--debug``."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterable, Iterator


class ZarrmillError(Exception):
    """Base class of every error zarrmill raises on purpose."""

    exit_code = 1


class ConfigError(ZarrmillError, ValueError):
    """A workflow file, a parameter or a command-line option is wrong. ``problems`` holds every
    problem found (one line each; ``zarrmill validate`` prints them all); the message is the first
    with a count of the rest."""

    exit_code = 2

    def __init__(self, message: str, problems: list[str] | None = None):
        self.problems = list(problems) if problems else [message]
        super().__init__(message)

    @classmethod
    def of(cls, problems: list[str]) -> "ConfigError":
        more = (f" (+{len(problems) - 1} more problem{'s' if len(problems) > 2 else ''}; zarrmill validate lists "
                "them)") if len(problems) > 1 else ""
        return cls(problems[0] + more, problems)


class InputError(ZarrmillError, ValueError):
    """An input file or store is missing, unreadable or inconsistent."""

    exit_code = 2


class InputNotFoundError(InputError, FileNotFoundError):
    """An input path does not exist."""


class OutputExistsError(ZarrmillError, FileExistsError):
    """The output exists and was written with other parameters (or by another tool)."""

    exit_code = 2


class StepFailedError(ZarrmillError, RuntimeError):
    """Some units of a step failed; the message summarises them."""


class ExecutorError(ZarrmillError, RuntimeError):
    """The cluster could not be started or lost all its workers."""


class Terminated(KeyboardInterrupt):
    """The process was sent SIGTERM (``kill``, ``scancel`` of a submitted driver, a job's walltime):
    handled as Ctrl-C is (units stop, worker jobs are cancelled, the ledger keeps what is done),
    and the command ends with 143 instead of 130."""

    exit_code = 143


class UnitError(ZarrmillError, RuntimeError):
    """Raised on a worker to describe a failed unit in one line."""


class UnsafeOutputError(ZarrmillError, PermissionError):
    """The output path is one zarrmill refuses to write (current folder, home, an input, a folder
    it did not create, a symlink loop)."""

    exit_code = 2


class OutputLockedError(ZarrmillError, BlockingIOError):
    """Another zarrmill run is writing this output right now."""

    exit_code = 2


def closest(name: object, known: Iterable[object]) -> str | None:
    """The known name nearest to a mistyped one (``injest`` -> ``ingest``, ``Threads`` -> ``threads``,
    ``unit-mb`` -> ``unit_mb``), or None when none is near: difflib's ratio, case and ``-``/``_``
    folded. The one helper every name lookup uses (tasks, parameters, settings, keys, kinds, steps)."""
    import difflib

    names = sorted({str(k) for k in known})
    folded: dict[str, str] = {}
    for n in names:
        folded.setdefault(n.lower().replace("-", "_"), n)
    text = str(name).lower().replace("-", "_")
    found = difflib.get_close_matches(text, list(folded), n=1, cutoff=0.6)
    return folded[found[0]] if found else None


def did_you_mean(name: object, known: Iterable[object]) -> str:
    """``did you mean 'ingest'?`` for a message, or "" when no known name is near."""
    near = closest(name, known)
    return f"did you mean {near!r}?" if near is not None else ""


def warn(where: object, what: str) -> None:
    """One ``zarrmill: warning:`` line naming the file or store and what zarrmill assumed or dropped,
    redacted here too: on a batch worker the line goes to the job's log file, not the CLI's terminal."""
    from .secret_text import redact

    line = redact(f"zarrmill: warning: {where}: {what}")
    held = _HELD.get()
    if held is not None:
        held.append(line)
        return
    print(line, file=sys.stderr, flush=True)


_HELD: ContextVar[list[str] | None] = ContextVar("zarrmill_held_warnings", default=None)


@contextmanager
def held_warnings() -> Iterator[list[str]]:
    """Warning lines kept in a list instead of printed (``zarrmill follow`` reads an acquisition
    still being written at every poll: its lines are said once, about the finished one)."""
    lines: list[str] = []
    token = _HELD.set(lines)
    try:
        yield lines
    finally:
        _HELD.reset(token)
