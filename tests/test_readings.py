"""genlab.readings: a sentence of a lab's text checked on the run's numbers, strict under the suite."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from genlab import readings
from genlab.readings import ReadingFailed, reading

ROOT = Path(__file__).resolve().parents[1]


def test_a_reading_that_holds_prints_its_numbers(capsys, monkeypatch):
    monkeypatch.setenv(readings.STRICT_ENV, "1")
    assert reading("the loss falls", True, "2.31 to 0.12") is True
    assert capsys.readouterr().out == "Reading: the loss falls (holds: 2.31 to 0.12).\n"


def test_a_false_reading_fails_the_suite(monkeypatch):
    monkeypatch.setenv(readings.STRICT_ENV, "1")
    with pytest.raises(ReadingFailed, match=r"the loss falls.*Measured: 2\.31 to 2\.40"):
        reading("the loss falls", False, "2.31 to 2.40")


def test_a_false_reading_tells_the_student_without_failing(capsys, monkeypatch):
    monkeypatch.delenv(readings.STRICT_ENV, raising=False)
    assert reading("the loss falls", False, "2.31 to 2.40") is False
    out = capsys.readouterr().out
    assert "does NOT hold in this run: the loss falls" in out and "trust the numbers" in out


def test_the_suite_runs_strict():
    """make test (and so CI) runs the notebooks with strict readings; the grader never passes the switch on."""
    from autograder.wall.sandbox import PASSED_ON

    assert readings.strict()                       # tests/conftest.py
    assert "GENLAB_STRICT_READINGS=1" in (ROOT / "Makefile").read_text()
    assert readings.STRICT_ENV not in PASSED_ON


def test_every_reading_is_a_literal_sentence():
    """Each call in the solutions states its sentence as a literal, so the text it checks can be read in the source."""
    calls = 0
    for path in sorted(ROOT.glob("solutions/*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            for match in re.finditer(r"\breading\(\s*(\S)", source):
                calls += 1
                assert match.group(1) in "\"'f", f"{path.name}: reading( without a literal sentence"
    assert calls >= 8
