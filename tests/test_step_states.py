"""The engine's crash-safety order as data (runtime/core/step_states.py): each move between the
states of a step's record, one by one, and the order a real run writes them in (step_run.py)."""
from __future__ import annotations

import dataclasses

import blosc2
import numpy as np
import pytest

from zarrmill.runtime.core import step_states
from zarrmill.runtime.core.ledger import Ledger
from zarrmill.runtime.core.step_states import DONE, FOLLOWING, MOVES, PLANNING, RUNNING, STATES, IllegalMove, move
from zarrmill.runtime.execution.engine import run_step
from zarrmill.runtime.execution.registry import get_task
from zarrmill.runtime.execution.step_run import StepOptions

ALLOWED = {(None, PLANNING), (PLANNING, PLANNING), (PLANNING, RUNNING), (RUNNING, PLANNING), (RUNNING, FOLLOWING),
           (RUNNING, DONE), (FOLLOWING, PLANNING), (DONE, PLANNING)}


@pytest.mark.parametrize("current", [None, *STATES])
@pytest.mark.parametrize("to", STATES)
def test_each_move_is_allowed_exactly_when_the_order_says(current, to):
    if (current, to) in ALLOWED:
        assert move(current, to) == to
    else:
        with pytest.raises(IllegalMove, match=f"from {current!r} to {to!r}"):
            move(current, to)


def test_a_record_of_a_state_this_version_does_not_know_may_only_be_planned_again():
    assert move("a-later-state", PLANNING) == PLANNING
    with pytest.raises(IllegalMove):
        move("a-later-state", DONE)


def test_every_state_is_reached_and_left():
    reached = {to for moves in MOVES.values() for to in moves}
    assert reached == set(STATES) and set(MOVES) == {None, *STATES}
    assert step_states.counts_as_finished(DONE) and step_states.counts_as_finished(FOLLOWING)
    assert not step_states.counts_as_finished(RUNNING) and not step_states.counts_as_finished(PLANNING)


def _written_states(monkeypatch) -> list[str]:
    written: list[str] = []
    original = Ledger.write_record

    def spy(self, rec):
        written.append(rec.state)
        return original(self, rec)

    monkeypatch.setattr(Ledger, "write_record", spy)
    return written


def test_a_run_writes_planning_then_running_then_done_and_a_rerun_writes_nothing(tmp_path, monkeypatch):
    written = _written_states(monkeypatch)
    task = get_task("cluster-check")
    params = task.params_model(output=str(tmp_path / "chk"), units=3)
    first = run_step("chk", task, params, lambda plan: None, StepOptions(quiet=True))
    assert first.ran == 3 and written == [PLANNING, RUNNING, DONE]
    written.clear()
    again = run_step("chk", task, params, lambda plan: None, StepOptions(quiet=True))
    assert again.was_done and written == []


def test_the_callers_options_are_not_changed_by_a_run(tmp_path):
    """What one step learns (its error log, budget, plan size) stays in its own copy: the next step
    of a workflow never starts with the last one's."""
    task = get_task("cluster-check")
    opts = StepOptions(quiet=True, unit_budget=lambda: 10**9)
    seen = []
    run_step("chk", task, task.params_model(output=str(tmp_path / "chk"), units=2),
             lambda plan: seen.append(plan) or None, opts)
    assert opts == StepOptions(quiet=True, unit_budget=opts.unit_budget)
    assert seen and seen[0].units == 2, "get_client is given the size of what is left"


def test_a_rerun_killed_while_planning_after_its_input_changed_never_keeps_the_old_inputs_units(tmp_path):
    """The record names the new inputs from ``planning`` on: the units done from the old input must
    be forgotten by then, or the next run skips them and serves the old pixels as done."""
    cases = tmp_path / "cases"
    cases.mkdir()
    for i in range(3):
        np.save(cases / f"c{i}.npy", np.full((8, 16, 16), 1, np.uint16))
    task = get_task("compress")
    params = task.params_model(input=str(cases), output=str(tmp_path / "out"), patch=[8, 16, 16])
    assert run_step("c", task, params, lambda plan: None, StepOptions(quiet=True)).ran == 3
    np.save(cases / "c0.npy", np.full((8, 16, 16), 7, np.uint16))  # the input changes

    def killed(p, ctx):
        raise KeyboardInterrupt("killed while planning")

    with pytest.raises(KeyboardInterrupt):
        run_step("c", dataclasses.replace(task, plan=killed), params, lambda plan: None, StepOptions(quiet=True))
    third = run_step("c", task, params, lambda plan: None, StepOptions(quiet=True))
    assert third.skipped == 0 and third.ran == 3, third
    (c0,) = [p for p in (tmp_path / "out").rglob("c0*.b2nd")]
    assert np.all(blosc2.open(str(c0), mode="r")[:] == 7), "the old input's pixels served as done"
