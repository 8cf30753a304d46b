from pathlib import Path

import pytest

from zarrmill.errors import OutputExistsError
from zarrmill.runtime.ledger import Ledger, StepRecord, params_hash


def rec(params):
    return StepRecord("t", params, params_hash("t", 1, params))


def test_done_ids_survive_reopen_and_ignore_torn_line(tmp_path: Path):
    led = Ledger(tmp_path, "step one")
    led.mark_done(["a", "b"])
    led.close()
    with open(led.dir / "done.log", "ab") as fh:
        fh.write(b"c-partial")  # a crash mid-line
    assert Ledger(tmp_path, "step one").done_ids() == {"a", "b"}
    assert led.dir.name == "step_one"


def test_same_params_resume_other_params_refused_unless_overwrite(tmp_path: Path):
    led = Ledger(tmp_path, "s")
    led.write_record(rec({"x": 1}))
    led.mark_done(["u1"])
    led.close()
    assert led.check_params(rec({"x": 1}), overwrite=False) is True
    with pytest.raises(OutputExistsError, match=r"x: 1 -> 2.*--overwrite"):
        led.check_params(rec({"x": 2}), overwrite=False)
    assert led.check_params(rec({"x": 2}), overwrite=True) is False
    assert led.done_ids() == set()


def test_hash_depends_on_task_version():
    assert params_hash("t", 1, {"a": 1}) != params_hash("t", 2, {"a": 1})
    assert params_hash("t", 1, {"a": 1, "b": 2}) == params_hash("t", 1, {"b": 2, "a": 1})
