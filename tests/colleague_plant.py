"""A colleague, after the runner's zarrmill was killed (run as a second user with the system's
Python): puts a link to PRIVATE at TARGET, exchanging it with what stands there
(``renameat2(RENAME_EXCHANGE)``: the store moves to LAB/.colleague-moved) or making it where nothing
is, and drops a file of their own into LAB. Prints one JSON line: {"planted": how, "moved": path}.

usage: colleague_plant.py TARGET PRIVATE LAB"""
import json
import os
import sys

from colleague_swap import exchange


def main() -> None:
    target, private, lab = sys.argv[1:4]
    moved = os.path.join(lab, ".colleague-moved")
    report = {"planted": "nothing", "moved": "", "errors": []}
    try:
        with open(os.path.join(lab, "colleague-notes.txt"), "w") as fh:
            fh.write("mine")
        if os.path.lexists(target):
            os.symlink(private, moved)
            code = exchange(target, moved)
            report.update(planted="exchanged" if code == 0 else f"errno {code}", moved=moved)
        else:
            os.symlink(private, target)
            report["planted"] = "made"
    except OSError as err:  # said, not raised: the test judges what was planted
        report["errors"].append(f"{type(err).__name__}: {err}")
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
