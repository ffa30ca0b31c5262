"""The grading pipeline (trusted side): release, grade, gradebook and feedback.

nbgrader runs helper programs (``alembic`` for the gradebook schema) by name, so the folder of the running
Python's scripts must be on PATH even when ``genlab`` is started without activating the environment.
"""
import os
import sys
from pathlib import Path

_scripts = str(Path(sys.executable).parent)
if _scripts not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _scripts + os.pathsep + os.environ.get("PATH", "")
