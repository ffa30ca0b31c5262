"""The reference solution, loaded from the one place it is written: ``solutions/<lab>/<lab>.ipynb``."""
from __future__ import annotations

import contextlib
import io
import os
from functools import lru_cache
from pathlib import Path

from genlab.testing.notebook import LabNotebook


def find_course_root(start: Path | None = None) -> Path:
    """The folder holding ``solutions/`` or ``labs/``: $GENLAB_ROOT, else the nearest parent of ``start``."""
    if os.environ.get("GENLAB_ROOT"):
        return Path(os.environ["GENLAB_ROOT"])
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "solutions").is_dir() or (folder / "labs").is_dir():
            return folder
    raise FileNotFoundError(f"no course folder (with solutions/ or labs/) above {here}; set GENLAB_ROOT")


def solution_path(lab: str, root: Path | None = None) -> Path:
    path = (root or find_course_root()) / "solutions" / lab / f"{lab}.ipynb"
    if not path.exists():
        raise FileNotFoundError(f"the reference solution {path} is not here: hidden tests need the "
                                "instructor's checkout (students only have labs/)")
    return path


class Reference:
    """Attribute access to the reference functions: ``reference.reparameterize(mu, logvar, eps)``."""

    def __init__(self, namespace: dict, names, differentiated: dict | None = None):
        self._namespace, self._names = namespace, tuple(names)
        # Functions whose gradient a test takes: measured (memory, FLOPs) with activation inputs, as the
        # student's are in the grader's kernel (LabNotebook.differentiated).
        self._differentiated = dict(differentiated or {})

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in self._namespace:
            raise AttributeError(f"the reference solution defines no `{name}`")
        value = self._namespace[name]
        if name in self._differentiated and callable(value) and not isinstance(value, type):
            from genlab.testing.calls import WithActivations

            return WithActivations(value, name, self._differentiated[name])
        return value

    def __dir__(self):
        return list(self._names)

    @classmethod
    def load(cls, nb: LabNotebook) -> "Reference":
        """The one loader of a reference: the notebook's setup and solution cells, executed here."""
        return cls(execute_reference(nb), nb.solutions, nb.differentiated)


def execute_reference(nb: LabNotebook) -> dict:
    """Runs the setup cell and every solution cell (solutions intact) in a fresh namespace."""
    namespace: dict = {"__name__": f"genlab_reference_{nb.path.stem}"}
    with contextlib.redirect_stdout(io.StringIO()):  # the setup cell greets students; not needed here
        exec(compile(nb.setup_source, f"<{nb.path.stem} setup>", "exec"), namespace)
    for cell_id, source in nb.solutions.items():
        exec(compile(source, f"<{nb.path.stem} {cell_id}>", "exec"), namespace)
    return namespace


@lru_cache(maxsize=None)
def load_reference(lab: str, root: str | None = None) -> Reference:
    return Reference.load(LabNotebook.read(solution_path(lab, Path(root) if root else None)))
