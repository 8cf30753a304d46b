"""A colleague on a group-writable share (run as a second user, with the system's Python: it needs
only the standard library). Waits until WAIT_FOR exists, then exchanges TARGET with a link to
PRIVATE in one ``renameat2(RENAME_EXCHANGE)``, as often as it can until the time is up or it
succeeded once; prints one JSON line: {"swapped": bool, "errors": {errno name: count}}.

usage: colleague_swap.py TARGET WAIT_FOR PRIVATE LAB SECONDS STOP (WAIT_FOR: a path, or FOLDER::N files in it) (the link is made in LAB; it
gives up once the file STOP exists)"""
import ctypes
import errno
import json
import os
import sys
import time

RENAME_EXCHANGE = 2
AT_FDCWD = -100


def exchange(a: str, b: str) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE)
    return 0 if result == 0 else ctypes.get_errno()


def ready(wait_for: str) -> bool:
    """WAIT_FOR exists; or, written ``FOLDER::N``, FOLDER holds N files at any depth (chunks
    being written somewhere in it)."""
    if "::" not in wait_for:
        return os.path.lexists(wait_for)
    folder, wanted = wait_for.split("::")
    found = 0
    for _, _, files in os.walk(folder):
        found += len(files)
        if found >= int(wanted):
            return True
    return False


def main() -> None:
    target, wait_for, private, lab, seconds, stop = *sys.argv[1:5], float(sys.argv[5]), sys.argv[6]
    link = os.path.join(lab, ".colleague-link")  # in the shared folder, where the colleague may write
    deadline = time.monotonic() + seconds
    errors: dict[str, int] = {}
    swapped = False
    while time.monotonic() < deadline and not ready(wait_for) and not os.path.exists(stop):
        time.sleep(0.001)
    os.symlink(private, link)
    while time.monotonic() < deadline and not swapped and not os.path.exists(stop):
        code = exchange(target, link)
        if code == 0:
            swapped = True
            break
        name = errno.errorcode.get(code, str(code))
        errors[name] = errors.get(name, 0) + 1
        time.sleep(0.002)
    print(json.dumps({"swapped": swapped, "errors": errors, "link": link}), flush=True)


if __name__ == "__main__":
    main()
