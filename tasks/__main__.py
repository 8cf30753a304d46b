"""``python -m zarrmill`` is the same as the ``zarrmill`` command (used in job scripts)."""
from zarrmill.runtime.front.cli import run

run()
