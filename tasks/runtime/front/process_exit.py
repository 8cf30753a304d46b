"""How a ``zarrmill`` process ends: its code, without the interpreter's teardown when nothing needs it.

A unit that fails while reading over https or S3 returns at its first error, while zarr's other
requests for the same region are still in flight in the object-store client's native threads
(obstore's runtime). When such a request finishes while the interpreter is tearing down, the
thread calling back into Python aborts the process (SIGABRT or SIGSEGV, seen in about one failed
run in twenty under load), and a failed run ended by a signal instead of exit 1 with its log path.
So once the command has returned, and everything it printed or logged is flushed, the process
leaves at once (``os._exit``) unless a child process or a thread that is not a daemon still runs:
then the interpreter's own shutdown waits for them, as always. Nothing zarrmill writes waits for
the teardown: every step has stored its units, finish and ledger before the command returns."""
from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
from typing import Callable, NoReturn

from ...errors import Terminated


def still_running() -> list[str]:
    """Child processes and non-daemon threads (besides this one) that need a normal shutdown."""
    children = [f"process {p.pid}" for p in multiprocessing.active_children()]
    threads = [f"thread {t.name}" for t in threading.enumerate()
               if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    return children + threads


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def stop_on_signals() -> None:
    """Ctrl-C raises KeyboardInterrupt and SIGTERM raises ``Terminated`` in the main thread, so
    both stop a run the same way (units stop, worker jobs are cancelled, the ledger keeps what is
    done) and the command says so and exits 130 or 143; a library that set its own handler on
    import (dask-jobqueue: ``sys.exit()``, exit 0) does not decide how a run ends."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)


def run_and_leave(main: Callable[[], int]) -> NoReturn:
    """``main()``, then end the process with its code (see the module's docstring). An error
    ``--debug`` lets through is printed as Python prints one (``sys.excepthook``: redacted) and
    ends the process with 1, as an uncaught error would."""
    stop_on_signals()
    try:
        code = main()
    except SystemExit as done:  # sys.exit inside: its code, its message as Python prints it
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if done.code is not None and not isinstance(done.code, int):
            print(done.code, file=sys.stderr)
    except KeyboardInterrupt as err:
        code = getattr(err, "exit_code", 130)
    except BaseException:  # noqa: BLE001 - printed whole, as the interpreter would
        sys.excepthook(*sys.exc_info())
        code = 1
    logging.shutdown()  # the run log and library logs, flushed and closed
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (``zarrmill ... | head``): nothing more to say
            pass
    if still_running():
        sys.exit(code)
    os._exit(code)
