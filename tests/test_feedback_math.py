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
