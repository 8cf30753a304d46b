"""Credentials never leave the process (issue #49): a unit whose error names an expired pre-signed
URL or a ``user:password@`` URL (here: an HTTP store whose chunks answer 403 naming them, as a
gateway that signs its redirects does) fails with that text redacted on the terminal, in
errors.log, in the run log and in a --debug traceback; provenance and run history are written
redacted; a job script that would carry one, a credential anywhere in a workflow or its parameters
and an AWS_ENDPOINT_URL* with one are refused in one line (exit 2) that does not repeat it."""
from __future__ import annotations

import functools
import json
import os
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from conftest import bookkeeping, zarrmill_subprocess
from helpers import generate_step, jobqueue_config, run_task, write_workflow

SIGNED = "https://bucket.s3.example/x?X-Amz-Signature=SECRETSIG&X-Amz-Credential=SECRETCRED"
USERPASS = "https://user:SECRETPW@host/y"


SECRETS = ("SECRETSIG", "SECRETCRED", "SECRETPW", "SECRETTOKEN")  # (AWS_SECRET_ACCESS_KEY is advice, not one)


def leaked(text: str) -> list[str]:
    """The secrets of this file's URLs that appear in ``text``."""
    return [s for s in SECRETS if s in text]


def files_holding_secrets(root: Path) -> list[Path]:
    """Every file under ``root`` with one of the secrets in it: where a credential landed."""
    return [p for p in root.rglob("*") if p.is_file() and leaked(p.read_bytes().decode(errors="replace"))]


@pytest.fixture
def expired_web(cli, tmp_path) -> Iterator[str]:
    """A web server on 127.0.0.1 with an OME-Zarr image at two places: under /img.zarr its
    metadata reads but its chunks answer 403 with a body naming a pre-signed URL and a
    user:password URL (the reader quotes the server's answer in its error); under
    /signed/img.zarr its metadata redirects to an expired pre-signed URL, as a data portal that
    hands out signed links does (the HTTP client names the URL it was sent to)."""
    web = tmp_path / "web"
    code, err = run_task(cli, "generate", f"output={web / 'img.zarr'}", "shape=[2,16,64,64]", "axes=czyx",
                         "chunks=[1,8,32,32]")
    assert code == 0, err
    shutil.copytree(web / "img.zarr", web / "signed" / "img.zarr")

    class Expired(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.startswith("/signed/") and self.path.endswith(".json"):
                self.send_response(302)
                self.send_header("Location", "/expired?" + SIGNED.split("?", 1)[1])
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif "/c/" in self.path or self.path.startswith("/expired"):
                body = f"Request has expired: {SIGNED} (mirror {USERPASS})".encode()
                self.send_response(403)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                super().do_GET()

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Expired, directory=str(web)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def rechunk_args(url: str, out: Path) -> list[str]:
    return ["--set", f"input={url}", "--set", f"output={out}", "--set", "chunks=[1,4,16,16]"]


@pytest.mark.parametrize("executor", ["sync", "local"])  # local: the error is made in a worker process
def test_a_units_error_naming_signed_urls_is_redacted_on_the_terminal_and_in_errors_log(cli, tmp_path, expired_web,
                                                                                        executor, monkeypatch):
    from zarrmill.runtime.execution import unit_runners

    made = []  # the failure as the worker made it: what a batch worker's own log shows of it

    def spy(opts: object, unit: dict, exc: BaseException) -> None:
        made.append(str(exc))
        log_failure(opts, unit, exc)

    log_failure = unit_runners.log_failure
    monkeypatch.setattr(unit_runners, "log_failure", spy)
    out = tmp_path / "copy.zarr"
    code, stdout, err = cli("task", "rechunk", "--executor", executor, *rechunk_args(f"{expired_web}/img.zarr", out))
    assert code == 1, err
    # the line still says what happened and where, without the secret parts of the URLs
    assert "Request has expired: https://bucket.s3.example/x?… (mirror https://host/y)" in err, err
    assert not leaked(stdout + err)
    assert len(made) == 1 and "Request has expired" in made[0] and not leaked(made[0])
    log = bookkeeping(out) / "steps" / "rechunk" / "errors.log"
    text = log.read_text()
    assert "PermissionDeniedError" in text and "Traceback" in text and "https://bucket.s3.example/x?…" in text
    assert files_holding_secrets(tmp_path) == []


def test_the_run_log_and_a_debug_traceback_of_a_real_run_hold_no_secret(tmp_path, expired_web):
    runs = tmp_path / "runs"
    # zarrmill's own warning quotes a value of the user's environment: a record for the run log
    env = {**os.environ, "ZARRMILL_RUNS_DIR": str(runs), "MALLOC_TRIM_THRESHOLD_": USERPASS}
    done = zarrmill_subprocess("task", "rechunk", "--executor", "sync",
                               *rechunk_args(f"{expired_web}/img.zarr", tmp_path / "copy.zarr"), env=env)
    assert done.returncode == 1, done.stderr
    assert "Request has expired" in done.stderr and "MALLOC_TRIM_THRESHOLD_='https://host/y'" in done.stderr
    assert not leaked(done.stdout + done.stderr)
    logs = list((runs / "logs").glob("*.log"))
    assert len(logs) == 1 and "MALLOC_TRIM_THRESHOLD_='https://host/y'" in logs[0].read_text()
    # --debug: the retried unit's debug record with its traceback, then the error's traceback
    wf = write_workflow(tmp_path / "wf.yaml", {"copy": {"task": "rechunk", "params": {
        "input": f"{expired_web}/img.zarr", "output": str(tmp_path / "copy2.zarr"), "chunks": [1, 4, 16, 16]}}},
        executor={"kind": "sync", "retries": 1})
    debug = zarrmill_subprocess("--debug", "run", wf, env={**os.environ, "ZARRMILL_RUNS_DIR": str(runs)})
    assert debug.returncode == 1
    assert "attempt 0 failed" in debug.stderr and "Traceback" in debug.stderr and "StepFailedError" in debug.stderr
    assert "https://bucket.s3.example/x?…" in debug.stderr
    assert not leaked(debug.stdout + debug.stderr)
    assert files_holding_secrets(tmp_path) == []


def test_an_unexpected_error_naming_a_signed_url_is_redacted_in_its_line_crash_file_and_debug_traceback(
        cli, tmp_path, runs_dir, expired_web):
    """The metadata redirects to an expired pre-signed URL: the HTTP client's error (not one
    zarrmill foresaw) names it; the line, the crash file and the --debug traceback do not."""
    args = rechunk_args(f"{expired_web}/signed/img.zarr", tmp_path / "copy.zarr")
    code, out, err = cli("task", "rechunk", "--executor", "sync", *args)
    assert code == 1 and "unexpected ClientResponseError: 403" in err and "/expired?…" in err, err
    assert not leaked(out + err)
    crash_file = Path(err.split("traceback: ", 1)[1].split(";", 1)[0])
    assert crash_file.parent == runs_dir / "crashes" and "Traceback" in crash_file.read_text()
    assert not leaked(crash_file.read_text())
    debug = zarrmill_subprocess("--debug", "task", "rechunk", "--executor", "sync", *args)
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "/expired?…" in debug.stderr, debug.stderr
    assert not leaked(debug.stdout + debug.stderr)
    assert files_holding_secrets(tmp_path) == []


def test_provenance_and_run_history_are_written_redacted(cli, tmp_path):
    """Parameters never hold a secret (refused below); a document written to a file is redacted
    all the same, in a zarr store's attributes, in a side file, in a dataset's run record."""
    from zarrmill.runtime.core.history import History
    from zarrmill.runtime.core.provenance import read_provenance, record_step

    store, folder = tmp_path / "img.zarr", tmp_path / "plain"
    code, err = run_task(cli, "generate", f"output={store}", "shape=[8,32,32]", "chunks=[8,32,32]")
    assert code == 0, err
    folder.mkdir()
    step = {"step": "copy", "task": "rechunk", "params": {"input": SIGNED}, "inputs": [{"path": USERPASS}]}
    for root in (store, folder):
        record_step(root, {"name": "wf", "file": SIGNED}, step)
        prov = read_provenance(root)
        assert prov["workflow"]["file"] == "https://bucket.s3.example/x?…"
        assert prov["steps"]["copy"]["params"]["input"] == "https://bucket.s3.example/x?…"
        assert prov["steps"]["copy"]["inputs"] == [{"path": "https://host/y"}]
        assert "generate" in json.dumps(prov) or root == folder  # the step written before is kept
    history = History(tmp_path / "state")
    run = history.start("ds", str(tmp_path / "ds"), "h", "fp", 0)
    history.end(run, "failed", error=f"task rechunk: 403: {SIGNED}")
    assert history.latest("ds").error == "task rechunk: 403: https://bucket.s3.example/x?…"
    assert files_holding_secrets(tmp_path) == []


@pytest.mark.parametrize("where", ["name", "vars", "prologue", "parameter"])
def test_a_credential_anywhere_in_a_workflow_is_one_line_naming_the_place(cli, tmp_path, where):
    """In the name it would name run folders and jobs, in a prologue a job script, in any text
    parameter (here ingest's channel names) the ledger and the provenance: refused before anything
    is written, with the file position or field."""
    out = tmp_path / "a.zarr"
    step = generate_step(out)
    if where == "parameter":
        step = {"task": "ingest", "params": {"input": str(tmp_path), "output": str(out), "format": "image",
                                             "channel_names": [USERPASS]}}
    doc = {"name": USERPASS if where == "name" else "t", "executor": {"kind": "sync"}, "steps": {"gen": step}}
    if where == "vars":
        doc["vars"] = {"mirror": SIGNED}
    if where == "prologue":
        doc["executor"] = {"kind": "slurm", "slurm": {"job_script_prologue": [f"export HTTPS_PROXY={USERPASS}"]}}
    wf = tmp_path / "wf.yaml"
    wf.write_text(yaml.safe_dump(doc, sort_keys=False))
    for args in (["run", wf], ["run", wf, "--dry-run"], ["validate", wf]):
        code, stdout, err = cli(*args)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "which zarrmill refuses" in err and not leaked(stdout + err)
        assert {"name": "wf.yaml:1:", "vars": "wf.yaml:", "prologue": "wf.yaml:", "parameter": "channel_names"}[where] in err
    assert not out.exists() and files_holding_secrets(tmp_path) == [wf]


def test_a_job_script_that_would_carry_a_credential_is_refused(cli, tmp_path, monkeypatch):
    """A driver job script (zarrmill submit) and a worker job script whose values come from
    dask-jobqueue's own config, which no workflow check sees: neither is printed nor written."""
    from zarrmill.errors import ConfigError
    from zarrmill.runtime.execution.jobqueue import render_job_script
    from zarrmill.runtime.execution.spec import ExecutorSpec

    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")},
                        executor={"kind": "slurm", "run_dir": str(tmp_path / "run")})
    logs = tmp_path / "logs"
    code, out, err = cli("submit", wf, "--print", "--log-dir", logs, f"--directive=--comment={SIGNED}")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--directive" in err, err
    assert not leaked(out + err)
    code, out, err = cli("submit", wf, "--print", "--log-dir", logs)
    assert code == 0 and "#SBATCH" in out, err  # the same without the credential prints
    with jobqueue_config({"jobqueue.slurm.job-extra-directives": [f"--comment={USERPASS}"]}):
        with pytest.raises(ConfigError, match="jobqueue.slurm config") as caught:
            render_job_script(ExecutorSpec(kind="slurm"), "wf", tmp_path / "run", None)
        assert not leaked(str(caught.value))
        code, out, err = cli("run", wf, "--dry-run")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "worker job script" in err, err
    assert not leaked(out + err) and "#SBATCH" not in out
    assert not logs.exists() and not (tmp_path / "run").exists()
    assert files_holding_secrets(tmp_path) == []


def test_an_endpoint_with_a_credential_in_the_environment_is_refused_like_storage_endpoint(tmp_path):
    out = tmp_path / "a.zarr"
    env = {**os.environ, "AWS_ENDPOINT_URL": "http://u:SECRETPW@127.0.0.1:9/"}
    done = zarrmill_subprocess("task", "generate", "--set", f"output={out}", "--set", "shape=[8,32,32]", env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and not leaked(done.stdout + done.stderr)
    assert done.stderr.startswith("zarrmill: error: http://127.0.0.1:9/: AWS_ENDPOINT_URL (environment variable) "
                                  "carries a user name and password")
    assert not out.exists()


@pytest.mark.parametrize("name", ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_STS"])
def test_every_aws_endpoint_variable_is_checked(cli, tmp_path, monkeypatch, name):
    monkeypatch.setenv(name, "https://s3.example.org/?X-Amz-Security-Token=SECRETTOKEN")
    code, out, err = cli("task", "generate", "--set", f"output={tmp_path / 'a.zarr'}", "--set", "shape=[8,32,32]")
    assert code == 2 and f"{name} (environment variable) carries a signed query" in err, err
    assert not leaked(out + err) and not (tmp_path / "a.zarr").exists()
    monkeypatch.setenv(name, "https://s3.example.org")  # the same endpoint without it is taken
    code, out, err = cli("task", "generate", "--set", f"output={tmp_path / 'a.zarr'}", "--set", "shape=[8,32,32]")
    assert code == 0, err
