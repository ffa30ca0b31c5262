"""What a platform's grading image is built from, for one lab: the grader, that lab, and how to install them.

``genlab release --gradescope LAB DIR`` zips this tree (:mod:`autograder.platforms.gradescope`), and
``genlab release --prairielearn LAB DIR`` writes it as an image's build context
(:mod:`autograder.platforms.prairielearn`):

- ``autograder/`` (the grader, without the sample submissions), ``solutions/<lab>/`` (the reference solutions
  and hidden tests) and ``labs/<lab>/<lab>.ipynb`` (the notebook students received): the course the grader
  runs from, which the grader makes its own before any kernel starts;
- ``wheels/genlab-*.whl``: the student package, installed into the grader's Python (outside the course
  folder, so that a kernel imports it without reaching the course);
- ``requirements.txt``: the pinned dependencies (``requirements/ci.txt``, what CI and the grading image use);
- ``setup.sh``: installs all of it (Python 3.11 or newer, bubblewrap, the user ``genlab-kernel``, a venv at
  ``/opt/genlab-venv``), once, as root, when the platform builds its image;
- the platform's entry point (``run_autograder`` for Gradescope, ``run_prairielearn`` for PrairieLearn).

Platform pages followed: Gradescope's "Autograder Specifications" (``setup.sh`` and ``run_autograder`` at the
root of the zip; https://gradescope-autograders.readthedocs.io/en/latest/specs/) and PrairieLearn's "External
Grading" (an image and an entry point; https://prairielearn.readthedocs.io/en/latest/externalGrading/).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from autograder.core.labs import LabFolder, lab_ids
from autograder.release.bundle import build_wheel

VENV = "/opt/genlab-venv"

SETUP_SH = f"""#!/usr/bin/env bash
# Installs genlab's grader for one lab (written by `genlab release --gradescope` or `--prairielearn`;
# autograder/platforms/package.py). Run once, as root, when the platform builds its image: Gradescope runs it
# in /autograder/source, the PrairieLearn image's Dockerfile in /opt/genlab-grader.
set -euo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# bubblewrap, the sandbox where the container lets it create namespaces; util-linux's setpriv and prlimit,
# which both walls use; Python 3.11 or newer (Ubuntu 22.04's python3 is 3.10: then its python3.11 package).
apt-get install -y -q --no-install-recommends python3 python3-venv bubblewrap util-linux
python=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  apt-get install -y -q --no-install-recommends python3.11 python3.11-venv
  python=python3.11
fi
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \\
  || {{ echo "genlab needs Python 3.11 or newer" >&2; exit 1; }}
# A release, not a candidate: Ubuntu 22.04's python3.11 is 3.11.0rc1, which lacks sys.get_int_max_str_digits, and
# torch's compiler then fails a correct Lab 1 notebook's beta_sweep_outcome (2 of 40 points lost; measured with
# deploy/image/setup-check.sh on an Ubuntu 22.04 root file system, 2026-12-05).
"$python" -c 'import sys; sys.exit(sys.version_info.releaselevel != "final")' \\
  || {{ echo "genlab needs a released Python 3.11 or newer, not $("$python" -V 2>&1) (Ubuntu 22.04's python3.11 is a" \\
       "release candidate, on which torch's compiler fails): choose a newer base image for the autograder, such" \\
       "as Ubuntu 24.04 (its python3 is 3.12)" >&2; exit 1; }}
# The unprivileged user student kernels run as in the bubblewrap sandbox: no home, no shell, no other group.
# (Container mode runs them as a uid of their own: autograder/wall/container.py.)
id -u genlab-kernel >/dev/null 2>&1 \\
  || useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin genlab-kernel
# The grader's Python, outside the course folder, which the grader closes to kernels: they start from it.
"$python" -m venv {VENV}
{VENV}/bin/pip install -q -r "$here/requirements.txt"
# The student package as students install it; the grader itself (autograder/) runs from this folder.
{VENV}/bin/pip install -q --no-deps "$here"/wheels/genlab-*.whl
"""


def write_tree(course: Path, lab: str, dest: Path, entry_name: str, entry_text: str) -> Path:
    """The tree described above, for ``lab`` of the course at ``course``, written into ``dest`` (which must not
    exist yet, or be empty), with the platform's entry point ``entry_name``."""
    course, dest = Path(course).resolve(), Path(dest).resolve()
    if lab not in lab_ids(course):
        raise ValueError(f"no lab {lab!r} under {course / 'solutions'}: the labs are {lab_ids(course)}")
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest} is not empty")
    folder = LabFolder(course, lab)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(course / "autograder", dest / "autograder",
                    ignore=shutil.ignore_patterns("samples", "__pycache__", "*.pyc"), dirs_exist_ok=True)
    shutil.copytree(folder.folder, dest / "solutions" / lab, ignore=skip)
    (dest / "labs" / lab).mkdir(parents=True)
    shutil.copyfile(folder.release, dest / "labs" / lab / folder.release.name)
    shutil.copyfile(course / "requirements" / "ci.txt", dest / "requirements.txt")
    build_wheel(course, dest / "wheels", labs=[lab])
    for name, text in (("setup.sh", SETUP_SH), (entry_name, entry_text)):
        (dest / name).write_text(text)
        (dest / name).chmod(0o755)
    return dest
