"""Finding and vetting handed-in notebooks before the grader (which runs with the instructor's rights) opens them."""
from __future__ import annotations

import os

import nbformat

from autograder.grading.assemble import assemble
from autograder.core.limits import Limits
from autograder.grading.submissions import locate, refusal

MAX = Limits().max_notebook_bytes

LAB = "lab1_vae"


def _notebook(path, grade_ids=("a", "b")):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade_id": g, "solution": True}})
                for g in grade_ids]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def test_a_plain_notebook_is_accepted(tmp_path):
    path = _notebook(tmp_path / "alice" / LAB / f"{LAB}.ipynb")
    assert refusal(path, tmp_path / "alice", MAX) == ("", "")
    assert locate(tmp_path / "alice", LAB, {"a", "b"}, MAX).refused == ""


def test_a_link_out_of_the_students_folder_is_tampering(tmp_path):
    secret = _notebook(tmp_path / "solutions" / f"{LAB}.ipynb")
    link = tmp_path / "eve" / LAB / f"{LAB}.ipynb"
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(secret, link.parent))
    found = locate(tmp_path / "eve", LAB, {"a", "b"}, MAX)
    assert found.status == "tampered" and "link" in found.refused


def test_a_linked_lab_folder_is_tampering(tmp_path):
    _notebook(tmp_path / "solutions" / LAB / f"{LAB}.ipynb")
    (tmp_path / "eve").mkdir()
    (tmp_path / "eve" / LAB).symlink_to(tmp_path / "solutions" / LAB)
    assert locate(tmp_path / "eve", LAB, {"a", "b"}, MAX).status == "tampered"


def test_a_named_pipe_is_refused_without_blocking(tmp_path):
    path = tmp_path / "bob" / LAB / f"{LAB}.ipynb"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    status, why = refusal(path, tmp_path / "bob", MAX)
    assert status == "error" and "not a regular file" in why


def test_an_oversized_notebook_is_refused_with_what_to_do(tmp_path):
    path = _notebook(tmp_path / "carol" / LAB / f"{LAB}.ipynb")
    status, why = refusal(path, tmp_path / "carol", max_bytes=100)
    assert status == "error" and "limit" in why and "Clear Outputs" in why


def test_misnamed_links_are_not_followed_when_searching(tmp_path):
    secret = _notebook(tmp_path / "solutions" / "x.ipynb")
    (tmp_path / "dave").mkdir()
    (tmp_path / "dave" / "Lab1.ipynb").symlink_to(secret)
    assert locate(tmp_path / "dave", LAB, {"a", "b"}, MAX).path is None


def test_grading_metadata_on_added_cells_is_dropped():
    release = nbformat.v4.new_notebook()
    release.cells = [nbformat.v4.new_code_cell("pass", metadata={"nbgrader": {"grade_id": "t", "grade": True,
                                                                              "points": 2, "locked": True}})]
    student = nbformat.v4.new_notebook()
    student.cells = [nbformat.v4.new_code_cell("pass", metadata={"nbgrader": {"grade_id": "t", "points": 99}}),
                     nbformat.v4.new_code_cell("assert True", metadata={"nbgrader": {"grade": True, "points": 500}})]
    out = assemble(student, release)
    assert out.nb.cells[0].metadata["nbgrader"]["points"] == 2
    assert "nbgrader" not in out.nb.cells[1].metadata
    assert any("grading metadata" in n for n in out.notes)


def test_cells_added_after_an_unknown_cell_are_kept():
    release = nbformat.v4.new_notebook()
    release.cells = [nbformat.v4.new_code_cell("pass", metadata={"nbgrader": {"grade_id": "t", "locked": True}})]
    student = nbformat.v4.new_notebook()
    student.cells = [nbformat.v4.new_code_cell("pass", metadata={"nbgrader": {"grade_id": "t"}}),
                     nbformat.v4.new_code_cell("1", metadata={"nbgrader": {"grade_id": "not-in-the-lab"}}),
                     nbformat.v4.new_code_cell("x = 2")]
    out = assemble(student, release)
    assert [c.source for c in out.nb.cells] == ["pass", "x = 2"]
    assert any("not part of this lab" in n for n in out.notes)


def test_a_manually_graded_markdown_answer_is_kept():
    """nbgrader's "manually graded answer" cells are the student's: the instructor must see their text."""
    meta = {"grade_id": "derivation", "solution": True, "grade": True, "points": 2, "locked": False}
    release = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("YOUR ANSWER HERE",
                                                                            metadata={"nbgrader": meta})])
    student = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("KL = log(s2/s1) + ...",
                                                                            metadata={"nbgrader": dict(meta)})])
    assembled = assemble(student, release)
    assert assembled.nb.cells[0].source == "KL = log(s2/s1) + ..."
    assert not assembled.notes
