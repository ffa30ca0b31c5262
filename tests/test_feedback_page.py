"""Issue 28: the feedback page a student reads. A "what to fix first" summary on top (the failed tests grouped
by the function they test, the named bug's explanation from the lab's catalogue first), then a styled per-test
table (test, status, points, message). The stylesheet is the grader's own, in the page's head, allowed by its
sha256 in the page's Content-Security-Policy; the student's text stays escaped, and the page stays inert.

The browser test opens the ``graded_class`` fixture's page of ``bug_kl_sign_flipped`` (graded once per run, for
tests/test_browser.py and tests/test_class_report.py too) in Debian's Chromium and saves a screenshot.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re

import nbformat
import pytest

from autograder.course.feedback import STYLESHEET, _summary_cell
from autograder.core.results import Result, Status
from autograder.core.sanitize import CSP_META, seal_page
from genlab.catalog import bug
from genlab.testing.runner import Outcome
from test_feedback_inert import active_markup

STUDENT = "bug_kl_sign_flipped"
BUG = bug("lab1_vae", "kl_sign_flipped")
HOSTILE = "<script>alert(1)</script>\n\n# not a heading\n<img src=x onerror=alert(2)> </style> $x$"


def _result() -> Result:
    """A small Lab 1 result: gaussian_kl with its catalogued bug, negative_elbo failing with it, a hostile
    message from the student's kernel."""
    def solution(grade_id):
        return nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade_id": grade_id, "solution": True,
                                                                    "grade": False, "locked": False}})
    nb = nbformat.v4.new_notebook(cells=[solution("gaussian_kl"), solution("negative_elbo")])
    outcomes = [Outcome("gaussian_kl_shape", Status.PASSED),
                Outcome("gaussian_kl_value", Status.FAILED, "got -1.5, expected 1.5", diagnosis=[BUG]),
                Outcome("negative_elbo_value", Status.ERROR, HOSTILE)]
    return Result("s1", "lab1_vae", outcomes, {o.test: 1.0 for o in outcomes}, notebook=nb)


def _sealed_page(tmp_path) -> str:
    from nbconvert import HTMLExporter

    page = HTMLExporter().from_notebook_node(nbformat.v4.new_notebook(cells=[_summary_cell(_result())]))[0]
    return seal_page(page, STYLESHEET)


def test_the_summary_puts_the_named_bug_first_and_escapes_the_student(tmp_path):
    html = _sealed_page(tmp_path)
    head, body = html.split("<body", 1)
    summary = body[body.index("What to fix first"):body.index("genlab-tests")]
    # gaussian_kl (a named bug) before negative_elbo; its explanation before its failed tests; the test that
    # passed is not in the summary
    assert summary.index("<code>gaussian_kl</code>") < summary.index("<code>negative_elbo</code>")
    assert summary.index(BUG.title) < summary.index("gaussian_kl_value") and "gaussian_kl_shape" not in summary
    assert "negative_elbo calls gaussian_kl" in summary  # the lab's DEPENDS: fix the callee first
    assert not active_markup(body) and "alert(1)" in body and "&lt;script&gt;" in body
    assert body.count("<h1") == 1   # the student's "# not a heading" stayed text, inside the summary's HTML
    assert "not a heading" not in head and "onerror" not in head   # no student text near the stylesheet


def test_the_stylesheet_is_allowed_by_its_hash_alone(tmp_path):
    html = _sealed_page(tmp_path)
    head = html.split("<body", 1)[0]
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="(style-src [^"]*)">', head)[1]
    digest = base64.b64encode(hashlib.sha256(STYLESHEET.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in policy and "unsafe-inline" not in policy and CSP_META in head
    assert head.count(f"<style>{STYLESHEET}</style>") == 1
    assert seal_page(html, STYLESHEET) == seal_page(seal_page(html, STYLESHEET), STYLESHEET)  # sealed once


def test_a_page_for_a_notebook_that_never_ran_shows_the_reason_as_text():
    from nbconvert import HTMLExporter

    reason = "no notebook lab1_vae.ipynb was handed in: <script>x()</script> & more"
    result = Result.every_test("s1", "lab1_vae", {"gaussian_kl_value": 2.0}, Status.MISSING, reason)
    page = HTMLExporter().from_notebook_node(nbformat.v4.new_notebook(cells=[_summary_cell(result)]))[0]
    body = seal_page(page, STYLESHEET).split("<body", 1)[1]
    assert "What to fix first" not in body and 'class="genlab-tests"' in body and not active_markup(body)
    assert body.count("&lt;script&gt;x()&lt;/script&gt; &amp; more") == 2   # in the table and under the reasons


def test_notes_and_evidence_quoting_the_notebook_stay_text():
    """A repair note or an evidence line can quote the student's notebook: a markdown link or a backtick in it is
    shown as typed, never rendered as a link or code that ends early."""
    from nbconvert import HTMLExporter

    result = _result()
    result.notes = ["cell [click](https://example.com/x) was `repaired` <b>bold</b>"]
    result.evidence = ["b, line 1: replaces `torch.allclose` [x](javascript:alert(1))"]
    page = HTMLExporter().from_notebook_node(nbformat.v4.new_notebook(cells=[_summary_cell(result)]))[0]
    body = seal_page(page, STYLESHEET).split("<body", 1)[1]
    assert "example.com" in body and "<a " not in body.split("Repairs made before grading", 1)[1]
    assert "[click](https://example.com/x) was `repaired` &lt;b&gt;bold&lt;/b&gt;" in body
    assert "replaces `torch.allclose` [x](javascript:alert(1))" in body and not active_markup(body)


@pytest.mark.slow
def test_the_page_in_chromium(browser, graded_class, tmp_path):
    """The styled table, the summary, MathML, no `$` in the prose, no script run, and a screenshot."""
    result = next(r for r in json.loads((graded_class / "results.json").read_text()) if r["student"] == STUDENT)
    failed = {t["test"] for t in result["tests"] if t["status"] != "passed"}
    page = browser.new_page(viewport={"width": 1200, "height": 1000})
    page.route(re.compile(r"^(?!file:|data:).*"), lambda route: route.abort())   # offline
    refused, dialogs = [], []
    page.on("console", lambda m: refused.append(m.text) if "style" in m.text.lower() else None)
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        page.goto((graded_class / "feedback" / STUDENT / "lab1_vae" / "lab1_vae.html").as_uri())
        # the table: every cell padded on both sides (so "passed" and "1/1" never run together), by more than
        # Chromium's own 1px (what a cell gets when the page's stylesheet is refused)
        pads = page.evaluate("""() => [...document.querySelectorAll('table.genlab-tests :is(td, th)')].map(c => {
            const s = getComputedStyle(c); return [parseFloat(s.paddingLeft), parseFloat(s.paddingRight)] })""")
        assert len(pads) == 4 * (len(result["tests"]) + 1) and min(min(p) for p in pads) > 2, pads[:4]
        assert not refused, refused   # the stylesheets' hashes are right: Chromium applied every one
        # the summary: one item per failing function, the catalogued bug's explanation above its tests
        items = page.evaluate("""() => [...document.querySelectorAll('.genlab-fix-first > ol > li')].map(li => ({
            function: li.querySelector('code').textContent,
            bug: li.querySelector('.genlab-bug')?.textContent ?? '',
            bugFirst: !!li.querySelector('.genlab-bug') &&
                      !!(li.querySelector('.genlab-bug').compareDocumentPosition(li.querySelector('ul')) & 4),
            tests: [...li.querySelectorAll('ul > li > code')].map(c => c.textContent)}))""")
        assert {t for i in items for t in i["tests"]} == failed, items
        for item in items:
            assert all(t == item["function"] or t.startswith(item["function"] + "_") for t in item["tests"]), item
        assert items[0]["function"] == BUG.function and items[0]["bugFirst"], items[0]
        assert BUG.title in items[0]["bug"] and BUG.fix in items[0]["bug"]
        # formulas are MathML, and no `$` is left in the prose (code, outputs and formulas aside)
        assert page.locator("math").count() > 0
        prose = page.evaluate("""() => { const body = document.body.cloneNode(true);
            body.querySelectorAll('pre, code, math, .input_area, .output_wrapper').forEach(e => e.remove());
            return body.textContent }""")
        assert "$" not in prose, re.findall(r".{0,60}\$.{0,60}", prose)[:5]
        # inert: the template's own inline script did not run (it defines init_mathjax), nor anything else
        assert page.evaluate("() => [typeof window.init_mathjax, typeof window.MathJax]") == ["undefined"] * 2
        assert not dialogs and not active_markup(page.content().split("<body", 1)[1])
        shot = tmp_path / "feedback-page.png"
        page.screenshot(path=str(shot), full_page=False)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000, shot
    finally:
        page.close()
