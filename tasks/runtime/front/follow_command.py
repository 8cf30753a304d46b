"""``zarrmill follow``: convert a plate while the instrument is still imaging it (ingest_follow.py).

The parameters are ingest's (``--set``, ``--params``); the follower runs until the instrument's end
marker appears or nothing has changed for ``--quiet``, then finishes the plate as a one-shot ingest
would. Rerun after a kill: it goes on where it stopped."""
from __future__ import annotations

import argparse
from pathlib import Path

from ...errors import ConfigError
from ..execution.kinds import EXECUTOR_KINDS


def add_follow_parser(sub: argparse._SubParsersAction, add_set) -> None:
    help_ = ("convert a plate while the instrument is still imaging it: each well as soon as it is complete, "
             "the plate finished at the instrument's end marker or after --quiet")
    p = sub.add_parser("follow", help=help_, description=help_)
    p.add_argument("--params", help="YAML or JSON file with ingest's parameters")
    add_set(p)
    p.add_argument("--executor", default="auto", choices=EXECUTOR_KINDS, help="where units run (as for zarrmill task)")
    p.add_argument("--poll", type=lambda text: _seconds(text, least=0.1), default=5.0, help="seconds between looks at the acquisition (default 5)")
    p.add_argument("--settle", type=_seconds, default=2.0,
                   help="a well unchanged this many seconds, the instrument elsewhere, is converted (default 2)")
    p.add_argument("--quiet", type=_seconds, default=1800.0, help="seconds without anything new after which the "
                   "acquisition counts as over, for instruments that write no end marker (default 1800)")
    p.add_argument("--overwrite", action="store_true")


def _seconds(text: str, least: float = 0.0) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not least <= value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"{text} must be between {least:g} and 604800 seconds (a week)")
    return value


def cmd_follow(args: argparse.Namespace) -> int:
    from ...ingest_follow import Follower, FollowSettings
    from .commands import apply_task_sets, single_task_workflow
    from ..execution.runner import run_workflow
    from ..core.yamlpos import Located, load_located

    doc = load_located(Path(args.params), "parameter file") if args.params else Located({}, "--set", {})
    if not isinstance(doc.data, dict):
        raise ConfigError(f"{args.params}: expected a mapping of ingest's parameter names to values")
    params = dict(doc.data)
    executor = apply_task_sets(params, args.set, args.executor)
    settings = FollowSettings(poll_seconds=args.poll, settle_seconds=args.settle, quiet_seconds=args.quiet)
    wf = single_task_workflow("ingest", params, executor, doc)
    run_workflow(wf, overwrite=args.overwrite, growing=lambda p: Follower(p, settings))
    return 0
