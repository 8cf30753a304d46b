from pathlib import Path

from zarrmill.runtime.core.ledger import Ledger, StepRecord, diff_params, params_hash


def rec(params):
    return StepRecord("t", params, params_hash("t", 1, params))


def test_done_ids_survive_reopen_and_ignore_torn_line(tmp_path: Path):
    led = Ledger(tmp_path, "step one")
    led.mark_done(["a", "b"])
    led.close()
    record = next((led.dir / "done").iterdir())
    with open(record, "ab") as fh:
        fh.write(b"c-partial")  # a crash mid-line (a file system without atomic creation)
    assert Ledger(tmp_path, "step one").done_ids() == {"a", "b"}
    assert led.dir.name == "step_one"


def test_param_diff_names_what_changed(tmp_path: Path):
    assert diff_params({"x": 1, "y": 2}, {"x": 2, "y": 2}) == "x: 1 -> 2"
    led = Ledger(tmp_path, "s")
    led.write_record(rec({"x": 1}))
    led.mark_done(["u1"])
    led.close()
    assert led.done_ids() == {"u1"}
    led.clear_done()
    assert led.done_ids() == set() and led.record().params == {"x": 1}


def test_hash_depends_on_task_version():
    assert params_hash("t", 1, {"a": 1}) != params_hash("t", 2, {"a": 1})
    assert params_hash("t", 1, {"a": 1, "b": 2}) == params_hash("t", 1, {"b": 2, "a": 1})
