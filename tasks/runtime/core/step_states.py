"""The states of a step's ledger record and the moves between them: the engine's crash-safety order
as data (execution/step_run.py follows it; tests/test_step_states.py checks each move).

Each state is written before the work it allows begins, so a run killed at any instant leaves a
record from which the rerun resumes to the same result:

- ``planning``: written before the plan creates anything. A kill now: the rerun plans again (what
  the plan made is the run's, reused or rolled back).
- ``running``: written once the plan's nodes are committed and the units counted. A kill now: the
  rerun skips the units the ledger lists as done.
- ``following``: one poll of a growing input (``zarrmill follow``) finished: what is there is valid;
  the next poll plans again.
- ``done``: written last, after ``finish()``, the provenance and the owner's seal. A kill before it:
  the rerun redoes ``finish()``, never serves a half-finished output as done.
"""
from __future__ import annotations

PLANNING, RUNNING, FOLLOWING, DONE = "planning", "running", "following", "done"
STATES = (PLANNING, RUNNING, FOLLOWING, DONE)

# the state a record is in (None: no record yet) -> the states a run may write next
MOVES: dict[str | None, tuple[str, ...]] = {
    None: (PLANNING,),
    PLANNING: (PLANNING, RUNNING),  # a kill while planning: the rerun plans again
    RUNNING: (PLANNING, FOLLOWING, DONE),  # a kill while running: the rerun plans again, done units kept
    FOLLOWING: (PLANNING,),  # the next poll of a growing input
    DONE: (PLANNING,),  # redone: other parameters, changed inputs, an earlier step redone, --overwrite
}


class IllegalMove(RuntimeError):
    """A move the order forbids (a bug in the engine, never the user's input)."""


def move(current: str | None, to: str) -> str:
    """``to``, if a record in ``current`` may be written as ``to`` next; else IllegalMove. A state
    this version does not know (a ledger of a later version) may only be planned again."""
    allowed = MOVES.get(current, (PLANNING,))
    if to not in allowed:
        raise IllegalMove(f"a step's record may not go from {current!r} to {to!r} (allowed: {', '.join(allowed)})")
    return to


def counts_as_finished(state: str | None) -> bool:
    """What ``status`` and ``check`` treat as complete: done, or valid as far as a follower got."""
    return state in (DONE, FOLLOWING)
