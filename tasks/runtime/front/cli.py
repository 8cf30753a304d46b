"""``zarrmill`` command line. Errors are one line (exit 2: bad input, 1: failed run); ``--debug``
shows tracebacks."""
from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import sys
import time
from typing import Any

from ... import __version__
from ...errors import ZarrmillError, did_you_mean
from ...io.storage.permissions import keep_writes_private, open_private
from .follow_command import add_follow_parser
from ..execution.kinds import EXECUTOR_KINDS
from ..execution.schedulers import BATCH_KINDS, DEFAULT_BATCH_KIND, SCHEDULERS


OPTIONS: set[str] = set()  # every option of every command (OneLineParser.add_argument)


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line like every other error (the usage is one --help away)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"zarrmill: error: {message}{self._closest_option(message)} (see: {self.prog} --help)\n")

    def _closest_option(self, message: str) -> str:
        """``; did you mean '--dry-run'?`` for a misspelt option (argparse names none; it reports a
        command's leftovers at the top, so every command's options are candidates)."""
        given = re.match(r"unrecognized arguments: (--?[\w-]+)", message)
        known = given is not None and given.group(1) in OPTIONS  # another command's option: no look-alike
        hint = did_you_mean(given.group(1), sorted(OPTIONS)) if given and not known else ""
        return f"; {hint}" if hint else ""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        OPTIONS.update(action.option_strings)
        return action

    def _check_value(self, action: argparse.Action, value: object) -> None:
        """An invalid choice (a command, ``--executor``, ``--scheduler``) names the closest one."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as err:
            hint = did_you_mean(value, action.choices or ())
            raise argparse.ArgumentError(action, f"{err.message}; {hint}" if hint else err.message) from None


class TaskHelp(argparse.Action):
    """``zarrmill task NAME --help`` (and ``tasks NAME --help``): that task's parameters, types,
    defaults and an example, not only the command's options; without a NAME the command's help."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, default: object = argparse.SUPPRESS,
                 help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        name = getattr(namespace, "name", None)
        if not name:
            parser.print_help()
            parser.exit()
        from ..execution.registry import get_task
        from .schema import task_help

        try:
            text = task_help(get_task(name))
        except ZarrmillError as err:  # an unknown task: one line with the closest name, exit 2
            parser.exit(err.exit_code, f"zarrmill: error: {err}\n")
        print(text)
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="zarrmill", description="Turn raw bioimaging data into chunked, analysis-ready stores, "
                           f"on this machine or on a cluster ({', '.join(s.label for s in SCHEDULERS.values())}) "
                           "through dask-jobqueue.")
    parser.add_argument("--version", action="version", version=f"zarrmill {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    parser.set_defaults(commands=sub.choices)  # every command's parser, by name (the manual prints their help)

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_)

    p = add("run", "run a workflow file (resumes where an earlier run stopped)")
    p.add_argument("workflow")
    p.add_argument("--executor", choices=EXECUTOR_KINDS)
    _add_set(p)
    p.add_argument("--dry-run", action="store_true",
                   help="plan every step and size it (units, bytes, memory, worker-hours), run nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: the sizes as JSON")
    p.add_argument("--overwrite", action="store_true", help="replace outputs written with other parameters")
    p.add_argument("--step", action="append", help="run only this step (repeatable)")

    p = sub.add_parser("task", add_help=False, help="run one task, parameters from --set and/or --params FILE",
                       description="run one task, parameters from --set and/or --params FILE, on this machine or "
                       "through --executor on a cluster", epilog=TASK_HELP_EPILOG)
    p.add_argument("-h", "--help", action=TaskHelp, help="with NAME: the task's parameters and an example")
    p.add_argument("name", help="the task (zarrmill tasks lists them)")
    p.add_argument("--params", help="YAML or JSON file with the task's parameters")
    _add_set(p)
    p.add_argument("--executor", default="auto", choices=EXECUTOR_KINDS)
    p.add_argument("--overwrite", action="store_true")

    p = sub.add_parser("tasks", add_help=False, help="list tasks, or show one task's parameters",
                       description="list tasks, or show one task's parameters", epilog=TASK_HELP_EPILOG)
    p.add_argument("-h", "--help", action=TaskHelp, help="with NAME: the task's parameters and an example")
    p.add_argument("name", nargs="?")

    p = add("validate", "check a workflow file without running it")
    p.add_argument("workflow")
    _add_set(p)

    add("schema", "print the JSON Schema of workflow files (for editor autocompletion)")

    p = add("status", "show the ledger of an output: units done per step")
    p.add_argument("output")

    p = add("tune", "measure compression layouts and codecs for random patch reads on your data")
    p.add_argument("input", help="sample data: .npy/TIFF file(s), folder of cases, zarr or OME-Zarr")
    p.add_argument("--patch", required=True, help="training patch size, e.g. 128,128,128 or 20,50,50")
    p.add_argument("--output", required=True, help="folder for tune.csv, tune.png, recommended.yaml")
    p.add_argument("--seconds", type=float, default=60.0, help="time budget for the read measurements")
    p.add_argument("--processes", type=int, default=1, help="reader processes (training workers)")
    p.add_argument("--policy", choices=["ratio", "speed", "balanced"], default="balanced")
    p.add_argument("--overwrite", action="store_true")

    p = add("runs", "history of a for_each workflow's scheduled conversions; --prune removes old run folders")
    p.add_argument("workflow", nargs="?")
    p.add_argument("--prune", action="store_true", help="remove run folders (logs, worker scratch) not used for --days")
    p.add_argument("--days", type=_non_negative_days, default=14.0, help="with --prune: age in days (default 14)")
    p.add_argument("--failed", action="store_true", help="only datasets whose latest attempt failed")
    p.add_argument("--retry", action="store_true", help="re-queue failed datasets for the next run")
    _add_set(p)

    p = add("check", "validate a store against the OME-NGFF schemas plus structural checks; exit 1 with every problem")
    p.add_argument("store")
    p.add_argument("--json", action="store_true", help="print the result as JSON (for scripts)")

    p = add("submit", "run a workflow's driver as a batch job (so you can log out)")
    p.add_argument("workflow")
    _add_set(p)
    p.add_argument("--scheduler", choices=BATCH_KINDS, help="where the driver job goes (default: the workflow's "
                   f"executor.kind, else {DEFAULT_BATCH_KIND})")
    p.add_argument("--time", default="24:00:00", help="driver walltime")
    p.add_argument("--mem", default="4G", help="driver memory")
    p.add_argument("--sbatch-arg", action="append", default=[], help="the same as --directive (the name of earlier releases)")
    p.add_argument("--directive", action="append", default=[], help="extra directive of the driver job in the "
                   "scheduler's syntax, e.g. --directive=--account=lab (repeatable)")
    p.add_argument("--log-dir", default="zarrmill-logs", help="where the driver log goes")
    p.add_argument("--print", action="store_true", dest="print_only", help="print the job script only")
    p.add_argument("--overwrite", action="store_true")

    add_follow_parser(sub, _add_set)

    p = add("sample-data", "write a small sample to try zarrmill on (a plate per instrument format, a volume with "
            "points, training folders); without NAME: list them")
    p.add_argument("name", nargs="?", help="the sample (zarrmill sample-data lists them)")
    p.add_argument("dest", nargs="?", help="folder to write it to: new or empty")
    return parser


TASK_HELP_EPILOG = "zarrmill task NAME --help (or zarrmill tasks NAME): a task's parameters and an example"


def _non_negative_days(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):  # also NaN
        raise argparse.ArgumentTypeError(f"{text!r}: days must be a number >= 0")
    return value


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a value (workflow: executor.kind=KIND, steps.S.params.X=..; task: X=.., "
                        "executor.KIND.SETTING=..)")


def run() -> None:
    """The ``zarrmill`` command and ``python -m zarrmill``: :func:`main`, then the process ends with
    its code (process_exit.py: without the interpreter's teardown when nothing needs it)."""
    from .process_exit import run_and_leave

    run_and_leave(main)


def main(argv: list[str] | None = None) -> int:
    from .redaction import redacted_terminal

    with redacted_terminal():  # every line the command prints, a usage error's too, without credentials
        return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    from ...io.storage.location import check_endpoint_environment, reset_clients
    from ..core.malloc import return_freed_memory
    from .redaction import redact_records, redacting_excepthook

    debug = "--debug" in argv  # accepted anywhere on the line, not only before the command
    try:
        args = build_parser().parse_args([a for a in argv if a != "--debug"])
    except SystemExit as done:  # --help, --version or a usage error (its line is printed): the exit code
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 2)
    args.debug = debug
    if debug:
        sys.excepthook = redacting_excepthook  # the traceback --debug lets through is printed redacted
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    for terminal in _terminal_handlers():
        redact_records(terminal)
    if not args.debug:
        _libraries_log_to_a_file()
    from .commands import COMMANDS
    from .follow_command import cmd_follow
    from .sample_data import cmd_sample_data  # its own module (it runs tasks through commands.py)

    COMMANDS.setdefault("sample-data", cmd_sample_data)
    COMMANDS.setdefault("follow", cmd_follow)

    return_freed_memory()  # before any plane is read; dask's local and batch-job workers inherit it
    keep_writes_private()  # what this run creates, nobody else renames (io/storage/permissions.py)
    try:
        check_endpoint_environment()  # AWS_ENDPOINT_URL* with a credential: one line, exit 2
        reset_clients()  # endpoint and credentials as the environment says now (tests run many commands)
        return COMMANDS[args.command](args)
    except ZarrmillError as err:
        if args.debug:
            raise
        lines = getattr(err, "problems", None) if args.command == "validate" else None
        for line in lines or [str(err)]:  # validate lists every problem; the rest say one line
            print(f"zarrmill: error: {one_line(line)}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:
        _quiet_closed_stdout()
        return 0
    except Exception as err:  # noqa: BLE001 - a bug or an unforeseen input: one line, traceback with --debug
        if args.debug:
            raise
        reason = _path_problem(err)
        if reason is not None:  # the file system said no (a path too long, a loop, a folder it cannot create)
            print(f"zarrmill: error: {one_line(reason)}", file=sys.stderr)
            return 2
        log = _save_traceback(err)
        print(one_line(f"zarrmill: error: unexpected {type(err).__name__}: {err} (traceback: "
                       f"{log or 'rerun with --debug'}; please report it)"), file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (errors.Terminated): never a success
        return interrupted(err)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """An error line as one line: a newline or other control character a user's value brought in
    (a path, a --set value) is shown escaped (``\\n``), never as a break."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def interrupted(err: BaseException) -> int:
    """The one line and the exit code of an interrupted command (130 for Ctrl-C, 143 for SIGTERM)."""
    from ...errors import Terminated

    what = "terminated (SIGTERM)" if isinstance(err, Terminated) else "interrupted"
    print(f"zarrmill: {what}; rerun the same command to resume", file=sys.stderr)
    return Terminated.exit_code if isinstance(err, Terminated) else 130


# libraries whose log records would print beside zarrmill's one line (tifffile's "invalid offset",
# distributed's worker chatter, zarr's "not recognized" walks): they go to a log file instead
LIBRARY_LOGGERS = ("tifffile", "bioio", "bioio_base", "bioio_ome_tiff", "bioio_tifffile", "zarr", "numcodecs", "dask",
                   "distributed", "dask_jobqueue", "ome_zarr", "fsspec", "s3fs", "botocore", "aiobotocore", "urllib3",
                   "PIL", "imagecodecs", "asyncio", "tornado", "blosc2")


def _libraries_log_to_a_file() -> None:
    """Library log records go to ``<runs folder>/logs/<time>-<pid>.log`` (made only when a record
    comes), never to the terminal; ``--debug`` shows them."""
    from .redaction import redact_records
    from ..core.rundirs import runs_root

    class FolderOnFirstRecord(logging.FileHandler):
        def _open(self):  # the folder and file appear only when a library logs something; the user's alone
            os.makedirs(os.path.dirname(self.baseFilename), exist_ok=True)
            return open(self.baseFilename, self.mode, encoding=self.encoding,
                        opener=lambda path, flags: open_private(path, flags))

    path = runs_root() / "logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    handler = FolderOnFirstRecord(path, delay=True, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    redact_records(handler)
    handler._zarrmill = True  # type: ignore[attr-defined]
    for name in LIBRARY_LOGGERS + ("",):  # "": the root, where every other library's records arrive
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if getattr(h, "_zarrmill", False)]:
            logger.removeHandler(old)  # the in-process CLI of the tests runs many commands
        logger.addHandler(handler)
        logger.propagate = not name
    # the terminal shows zarrmill's own records only; other libraries' (bioio-czi's tracebacks,
    # xsdata's converter warnings through Python's warnings) are in the file
    for terminal in _terminal_handlers():
        if not any(isinstance(f, _OwnRecords) for f in terminal.filters):
            terminal.addFilter(_OwnRecords())
    logging.captureWarnings(True)


def _terminal_handlers() -> list[logging.Handler]:
    """The root's plain stream handlers: what ``logging.basicConfig`` installed for the terminal."""
    return [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]


class _OwnRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == "zarrmill" or record.name.startswith("zarrmill.")


PATH_ERRNOS = {errno.ENAMETOOLONG: "a file name is too long (255 bytes per name); choose a shorter path",
               errno.ELOOP: "the path runs through a symlink loop; fix or remove the link",
               errno.ENOENT: "a folder on the path does not exist and cannot be created here",
               errno.EACCES: "permission denied; choose a path you may write (or read)",
               errno.EPERM: "operation not permitted on this path",
               errno.EROFS: "the file system is read-only; choose a writable path",
               errno.ENOTDIR: "a part of the path is a file, not a folder",
               errno.ENOSPC: "no space left on the device",
               errno.EDQUOT: "disk quota exceeded"}


def _path_problem(err: BaseException) -> str | None:
    """One line for the file-system errors a user's path causes, naming the path; None for bugs."""
    if isinstance(err, RuntimeError) and str(err).startswith("Symlink loop from"):  # Path.resolve, Python 3.11/12
        return f"{str(err).split('from', 1)[1].strip().strip(chr(39))}: {PATH_ERRNOS[errno.ELOOP]}"
    if isinstance(err, OSError) and err.errno in PATH_ERRNOS:
        where = err.filename if err.filename is not None else "?"
        return f"{where}: {PATH_ERRNOS[err.errno]} ({err.strerror})"
    return None


def _save_traceback(err: BaseException) -> str:
    """A bug's traceback goes to a file under the runs folder, not the terminal; returns its path."""
    import traceback

    from ...io.storage.secrets import redact
    from ..core.rundirs import runs_root

    try:
        folder = runs_root() / "crashes"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        with open(path, "w", encoding="utf-8", opener=lambda p, flags: open_private(p, flags)) as fh:  # the user's alone
            fh.write(redact(f"zarrmill {' '.join(sys.argv[1:])}\n" + "".join(traceback.format_exception(err))))
        return str(path)
    except OSError:
        return ""


def _quiet_closed_stdout() -> None:
    """The reader of our output went away (``zarrmill tasks | head``): end quietly, as a pipe
    expects. Point stdout at /dev/null so the interpreter's final flush does not complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
