"""Progress of a step: units done/total, MB/s, ETA. A rich bar on a terminal, otherwise a log
line every few seconds (batch jobs, CI)."""
from __future__ import annotations

import sys
import time
from typing import TextIO

LOG_EVERY_S = 5.0


class Progress:
    def __init__(self, label: str, total: int, already_done: int = 0, stream: TextIO | None = None):
        self.label = label
        self.total = total
        self.done = already_done
        self.start_done = already_done
        self.bytes = 0
        self.failed = 0
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self._last_log = self.t0
        self._bar = None
        if self.stream.isatty() and total > already_done:
            self._start_rich()

    def _start_rich(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), transient=False,
        )
        self._bar.start()
        self._task = self._bar.add_task(self.label, total=self.total, completed=self.done, rate="")

    def advance(self, nbytes: int = 0, failed: bool = False) -> None:
        self.done += 1
        self.failed += int(failed)
        self.bytes += nbytes
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, rate=self._rate())
            return
        now = time.monotonic()
        if now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            self._log_line()

    def _rate(self) -> str:
        dt = max(time.monotonic() - self.t0, 1e-9)
        return f"{self.bytes / dt / 1e6:.1f} MB/s"

    def eta_s(self) -> float | None:
        ran = self.done - self.start_done
        if ran <= 0:
            return None
        return (self.total - self.done) * (time.monotonic() - self.t0) / ran

    def _log_line(self) -> None:
        eta = self.eta_s()
        eta_txt = f", ETA {eta:.0f}s" if eta is not None else ""
        fail_txt = f", {self.failed} failed" if self.failed else ""
        print(f"[{self.label}] {self.done}/{self.total} units, {self._rate()}{eta_txt}{fail_txt}",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self.done > self.start_done:
            self._log_line()
