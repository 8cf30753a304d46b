"""Every line the CLI lets out of the process passes through ``secrets.redact``: whatever the
command prints on stdout and stderr (its one-line errors, step messages, progress, warnings),
the records of every logging handler zarrmill installs (tracebacks included) and, under
``--debug``, the traceback of an error. Files are redacted where they are written (errors.log,
crash files, provenance, run history) and job scripts that would carry a credential are refused."""
from __future__ import annotations

import logging
import sys
import traceback
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Iterable, Iterator, TextIO

from ...io.storage.secrets import redact


class RedactingFilter(logging.Filter):
    """On a handler: the record's message, exception and stack text redacted before any formatter
    sees them (a filter, so each handler keeps its own format)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: the handler reports it as logging does
            return True
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:  # what Formatter.format would add, made here to redact it
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def redact_records(handler: logging.Handler) -> logging.Handler:
    """``handler`` with a RedactingFilter (once: the in-process CLI of the tests runs many commands)."""
    if not any(isinstance(f, RedactingFilter) for f in handler.filters):
        handler.addFilter(RedactingFilter())
    return handler


class _RedactingStream:
    """A text stream whose writes are redacted; everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)  # what the caller wrote, as a stream reports it

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def redacted_terminal() -> Iterator[None]:
    """stdout and stderr redacted while a command runs: one place for every print of every module
    (the engine's step lines, the scheduler's per-dataset lines, tracebacks of a dataset's bug)."""
    old = sys.stdout, sys.stderr
    # a stream that is None (no console) stays None: print() skips it
    sys.stdout, sys.stderr = (None if s is None else _RedactingStream(s) for s in old)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = old


def redacting_excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """``--debug`` lets an error through with its traceback: printed redacted like every other line."""
    sys.stderr.write(redact("".join(traceback.format_exception(kind, value, tb))))
