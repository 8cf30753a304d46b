"""How a zarrmill process ends (runtime/front/process_exit.py): with the command's code, what it
printed flushed, and without the interpreter's teardown (where an object-store client's native
thread, still finishing a request a failed unit started, aborted the process now and then: exit
-6 or -11 instead of 1, tests/test_redaction.py) unless a child process or a non-daemon thread
still needs it."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import atexit, os, sys, threading
from zarrmill.runtime.front.process_exit import run_and_leave
atexit.register(lambda: os.write(2, b"TEARDOWN"))
"""


def _run(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True, text=True,
                          timeout=60)


def test_the_command_s_code_and_output_without_the_teardown():
    done = _run("""
        def main():
            print("the line", end="")  # unflushed: a pipe is block-buffered
            print("the error", file=sys.stderr, end="")
            return 3
        run_and_leave(main)
    """)
    assert done.returncode == 3
    assert done.stdout == "the line" and done.stderr == "the error"  # nothing of the teardown


def test_a_thread_still_working_gets_the_normal_shutdown():
    done = _run("""
        import time
        def main():
            threading.Thread(target=time.sleep, args=(0.3,), name="writer").start()
            return 1
        run_and_leave(main)
    """)
    assert done.returncode == 1 and done.stderr.endswith("TEARDOWN")


@pytest.mark.parametrize("raised, code", [("ValueError('debug lets it through')", 1), ("SystemExit(4)", 4),
                                          ("KeyboardInterrupt()", 130)])
def test_an_error_let_through_is_printed_and_ends_the_process(raised, code):
    done = _run(f"""
        def main():
            raise {raised}
        run_and_leave(main)
    """)
    assert done.returncode == code, done.stderr
    assert "TEARDOWN" not in done.stderr
    if code == 1:
        assert "Traceback" in done.stderr and "ValueError: debug lets it through" in done.stderr


def test_the_zarrmill_command_ends_with_its_code():
    bad = subprocess.run([sys.executable, "-m", "zarrmill", "task", "nosuch"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("zarrmill: error: unknown task 'nosuch'"), bad.stderr
    assert subprocess.run([sys.executable, "-m", "zarrmill", "--version"], capture_output=True).returncode == 0
