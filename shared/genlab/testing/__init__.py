"""Testing student code: the same test cells run in a student's kernel and in the trusted grader.

``reference`` gives hidden tests the reference solution of the current lab (``genlab.setup(lab)``):
in the instructor's checkout it is loaded from ``solutions/<lab>/<lab>.ipynb``; students never need it,
because hidden tests are stripped from their notebooks.
"""
from __future__ import annotations

from genlab.testing.reference import Reference, load_reference


class _CurrentReference:
    lab: str | None = None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self.lab is None:
            raise RuntimeError("call genlab.setup('<lab id>') first: the reference depends on the lab")
        return getattr(load_reference(self.lab), name)


reference = _CurrentReference()

__all__ = ["reference", "Reference", "load_reference"]
