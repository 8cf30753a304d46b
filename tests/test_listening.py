"""While a run works, nothing it started listens outside the loopback addresses (the manual promises
127.0.0.1 for every dashboard), and the dashboard link it prints opens (#27)."""
from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from conftest import REPO


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket of a process and its children."""
    try:
        procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    out = set()
    for proc in procs:
        try:
            out |= {(c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            pass
    return out


def test_listening_sees_a_socket_bound_to_every_interface():  # the check below can fail
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        assert ("0.0.0.0", s.getsockname()[1]) in listening(os.getpid())


@pytest.mark.parametrize("executor", ["sync", "threads", "local"])
def test_a_run_listens_on_loopback_only_and_its_dashboard_link_opens(tmp_path, executor):
    env = dict(os.environ, PYTHONPATH=str(REPO / "tests"), ZARRMILL_RUNS_DIR=str(tmp_path / "runs"))
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "zarrmill", "task", "cluster-check", "--executor", executor,
                                 "--set", f"output={tmp_path / 'out'}", "--set", "units=6", "--set", "busy_ms=1500"],
                                stderr=err, env=env)
    seen: set[tuple[str, int]] = set()
    link, opened = None, False
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        seen |= listening(proc.pid)
        found = re.findall(r"dashboard: (\S+)", log.read_text())
        if found and not opened:
            link = found[0]
            try:
                with urllib.request.urlopen(link, timeout=5) as response:
                    opened = response.status == 200
            except OSError:
                pass
        time.sleep(0.2)
    proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()
    outside = {(ip, port) for ip, port in seen if not ipaddress.ip_address(ip.split("%")[0]).is_loopback}
    assert not outside, f"{executor}: listening outside loopback: {outside}"
    if executor == "sync":
        assert link is None and not seen
    else:
        assert seen, "the run was too short to see its sockets"
        assert link is not None and opened, f"{executor}: printed dashboard link {link} did not open"
        assert Path(tmp_path / "out").is_dir()
