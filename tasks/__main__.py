"""``python -m zarrmill`` is the same as the ``zarrmill`` command (used in job scripts)."""
import sys

from zarrmill.runtime.front.cli import main

sys.exit(main())
