"""``python -m tasks`` is the same as the ``zarrmill`` command (used in job scripts)."""
import sys

from tasks.runtime.cli import main

sys.exit(main())
