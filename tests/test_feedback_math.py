"""Formulas on feedback pages: LaTeX drawn as MathML on the server (no script: the page's CSP forbids MathJax)."""
from __future__ import annotations

import re

import nbformat
import pytest

from autograder.core.sanitize import CSP_META, clean_page_body, render_math, seal_page
from test_feedback_inert import CHROMIUM, _browser_missing, _skip_or_fail, active_markup, dump_dom

# Lab 2's notation, as a markdown cell of the lab writes it, with a formula the converter cannot read
PROSE = (r"The forward kernel is $q(x_t \mid x_{t-1}) = \mathcal{N}(\sqrt{1-\beta_t}\, x_{t-1}, \beta_t I)$, so"
         "\n\n" r"$$\bar\alpha_t = \prod_{s=1}^{t} (1 - \beta_s)$$" "\n\n"
         r"Code keeps its dollars: `echo $HOME`. A broken formula stays readable: $\frac{1}{$.")


def test_formulas_become_mathml_and_code_does_not():
    out = render_math("<p>$a_1 &lt; b$ and <code>$x$</code></p><pre>$y$</pre>")
    assert out.startswith('<p><math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">')
    assert "&lt; b" not in out and "<code>$x$</code>" in out and "<pre>$y$</pre>" in out
    assert 'display="block"' in render_math(r"<p>$$\sum_i x_i$$ and \[x\]</p>")


def test_the_allow_list_stays_strict_inside_math():
    hostile = ('<math><mi href="javascript:alert(1)" onclick="x()">a</mi>'
               '<annotation-xml encoding="text/html"><img src=x onerror="y()"></annotation-xml>'
               '<maction actiontype="statusline"><mi>b</mi></maction></math>')
    cleaned = clean_page_body(hostile)
    assert "href" not in cleaned and "onclick" not in cleaned and "onerror" not in cleaned
    assert "annotation-xml" not in cleaned and "maction" not in cleaned and "<mi>a</mi>" in cleaned


def _page(tmp_path):
    from nbconvert import HTMLExporter

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(PROSE)])
    path = tmp_path / "page.html"
    path.write_text(seal_page(HTMLExporter().from_notebook_node(nb)[0]))
    return path


def test_a_rendered_page_has_mathml_and_no_dollar_left_in_its_prose(tmp_path):
    html = _page(tmp_path).read_text()
    body = html.split("<body", 1)[1]
    assert CSP_META in html and len(re.findall(r"<math\b", body)) == 2 and not active_markup(body)
    prose = re.sub(r"<code\b.*?</code>|<math\b.*?</math>|<[^>]+>", "", body, flags=re.DOTALL)
    assert prose.count("$") == 2 and r"$\frac{1}{$" in prose     # only the formula that could not be drawn


def test_chromium_draws_the_mathml(tmp_path):
    if _browser_missing():
        _skip_or_fail(_browser_missing())
    dom = dump_dom(_page(tmp_path), tmp_path / "profile")
    assert len(re.findall(r"<math\b", dom)) == 2, CHROMIUM
    assert "<msqrt>" in dom and "<munderover>" in dom


@pytest.fixture(autouse=True)
def _converter():
    pytest.importorskip("latex2mathml", reason="pip install latex2mathml (requirements/ci.txt)")


# -- the budget of a page (issue 39) -------------------------------------------------------------------------
def test_formulas_are_found_as_the_pattern_finds_them_in_linear_time():
    """sanitize._formulas is _MATH.finditer without its search from every opening delimiter to the end."""
    import random

    from autograder.core.sanitize import _MATH, _formulas

    rng = random.Random(0)
    pieces = ["$", "$$", "\\", "(", ")", "[", "]", "a", " ", "\n"]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        expected = [(m.start(), m.end(), m["d1"] or m["d2"] or m["i1"] or m["i2"], bool(m["d1"] or m["d2"]))
                    for m in _MATH.finditer(text)]
        assert _formulas(text) == expected, text


def _render_and_seal(nb) -> tuple[float, str]:
    """CPU seconds to render ``nb`` as grading does (inert, nbgrader's exporter, sealed), and the sealed page."""
    import time

    from autograder.core.sanitize import inert_notebook
    from autograder.course.feedback import STYLESHEET
    from autograder.course.html_export import FeedbackHTMLExporter, clear_caches

    clear_caches()   # each page timed as a fresh process draws it: no cell highlighted or formula drawn before
    start = time.process_time()
    page = seal_page(FeedbackHTMLExporter().from_notebook_node(inert_notebook(nb))[0], STYLESHEET)
    return time.process_time() - start, page


def test_unclosed_math_delimiters_cost_about_what_a_normal_page_costs():
    """100 kB of unclosed \\( in a Markdown output (rendered: 19.98 s, sealed: 7.47 s before the budget, against
    0.63 s and 0.07 s for the page without it, on a 2-core EPYC), in a markdown cell the student wrote, and as
    text in an HTML output: the page costs about what the same page costs without them. The bound is relative
    to the normal page, timed here, and generous: before the budget the ratio was about 40."""
    from pathlib import Path

    release = Path(__file__).resolve().parents[1] / "labs" / "lab1_vae" / "lab1_vae.ipynb"
    normal = nbformat.read(str(release), as_version=4)
    normal_s, _ = _render_and_seal(normal)
    attacked = nbformat.read(str(release), as_version=4)
    code = next(c for c in attacked.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": "\\\\(" * 33_334}),
                    nbformat.v4.new_output("display_data", data={"text/html": "<p>" + "\\(" * 50_000 + "</p>"})]
    attacked.cells.append(nbformat.v4.new_markdown_cell("\\\\[" * 33_334))   # added by the student
    attacked_s, page = _render_and_seal(attacked)
    assert attacked_s < 3 * normal_s + 0.5, (attacked_s, normal_s)
    assert page.count("this Markdown is shown as plain text, cut to its first 20,000 characters") == 2
    assert "math delimiters, over 400" in page


def test_pages_drawn_from_the_caches_are_the_pages_drawn_without_them():
    """A process draws many pages (autograder.course.html_export): highlighting, templates and formulas are
    cached by content. The same notebook drawn cold, drawn again warm, and a second notebook that shares most
    cells drawn warm give the pages each gives when drawn cold."""
    from pathlib import Path

    from autograder.course.html_export import clear_caches

    release = Path(__file__).resolve().parents[1] / "labs" / "lab2_diffusion" / "lab2_diffusion.ipynb"
    first = nbformat.read(str(release), as_version=4)
    second = nbformat.read(str(release), as_version=4)
    cell = next(c for c in second.cells if c.cell_type == "code" and "def " in c.source)
    cell.source += "\n# the student's own line, $x$ in a comment"
    second.cells.append(nbformat.v4.new_markdown_cell(PROSE))
    _, cold_first = _render_and_seal(first)
    _, cold_second = _render_and_seal(second)          # each starts from empty caches
    _, warm_first = _render_and_seal_warm(first)
    _, warm_second = _render_and_seal_warm(second)
    assert warm_first == cold_first and warm_second == cold_second and cold_first != cold_second
    clear_caches()


def _render_and_seal_warm(nb) -> tuple[float, str]:
    """As :func:`_render_and_seal`, the caches kept from the pages drawn before."""
    import time

    from autograder.core.sanitize import inert_notebook
    from autograder.course.feedback import STYLESHEET
    from autograder.course.html_export import FeedbackHTMLExporter

    start = time.process_time()
    page = seal_page(FeedbackHTMLExporter().from_notebook_node(inert_notebook(nb))[0], STYLESHEET)
    return time.process_time() - start, page


def test_markdown_within_the_budget_is_still_rendered_and_the_labs_own_cells_always_are():
    from autograder.core.sanitize import RenderBudget, inert_notebook

    cell = nbformat.v4.new_markdown_cell("$" * 1000, metadata={"nbgrader": {"locked": True, "grade_id": "intro"}})
    answer = nbformat.v4.new_markdown_cell(r"My answer: $\beta = 2$.", metadata={"nbgrader": {"solution": True}})
    outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": f"row {i}: $x_{i}$"}) for i in range(3)]
    nb = inert_notebook(nbformat.v4.new_notebook(cells=[cell, answer, nbformat.v4.new_code_cell(outputs=outputs)]))
    assert nb.cells[0].source == "$" * 1000 and nb.cells[1].source == answer.source
    assert [o.data["text/markdown"] for o in nb.cells[2].outputs] == [o.data["text/markdown"] for o in outputs]
    once = inert_notebook(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("\\\\[" * 10_000)]))
    assert once.cells[0].source.startswith("<pre>"), "over 400 delimiters: shown as text"
    assert inert_notebook(once).cells[0].source == once.cells[0].source, "genlab feedback renders pages again"
    budget = RenderBudget(page_chars=30)   # the page's budget spent: later Markdown is shown as text
    assert budget.refuse("a" * 20) == "" and "of the" in budget.refuse("b" * 20)
