"""``make docs``: the course as a static site, readable before anything is installed, built offline.

Sphinx with MyST (``myst-parser``), ``myst-nb`` reading the notebooks and the ``sphinx-book-theme``: what
Jupyter Book 1 builds, run here as a library with its configuration in :data:`CONFIG` (no ``conf.py``). The
source is staged in a folder of its own, laid out as in the repository, so that the links written for GitHub
(``docs/notation.md`` in the README, ``../../docs/notation.md`` in a lab) resolve as they are:

- ``README.md``, the home page (``index.html`` sends the reader there), with the navigation appended: every
  ``docs/*.md`` and every lab, found by glob;
- ``docs/`` as it is (the guides, ``notation.md``, the screenshots);
- ``labs/<lab>/<lab>.ipynb``, each lab as students receive it (:func:`autograder.core.labs.discover`): text,
  derivations and the code cells without solutions or hidden tests. The notebooks are not executed (their
  solution cells raise ``NotImplementedError``). Nothing else of the repository is staged: ``solutions/`` and
  ``autograder/samples/`` can never reach the site.

Formulas are drawn as MathML at build time (latex2mathml, as the feedback pages are:
:func:`autograder.core.sanitize.render_math`), not by MathJax: Chromium and Firefox render MathML without any
script, so the page loads nothing from anywhere (Sphinx's default MathJax comes from a CDN; MathJax 3 is an npm
package, not on PyPI, so vendoring it would bring npm into the build), and a test can see that each formula was
drawn. Every formula of the labs converts (tests/test_docs_site.py checks it in Chromium).

The built site is then read back as the student bundle is (:func:`autograder.release.bundle.check`): the code blocks
and the text of every page are written out as one notebook per page, and no function or run of statements in
them may be a solution or a near copy of one, and no hidden test line may appear. ``python -m autograder.release.site
OUT`` exits 1 when the site is not clean.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

from autograder.core.labs import discover

ROOT = Path(__file__).resolve().parents[2]

# The home page's navigation: the guides, then the labs, each globbed (none is listed by name).
TOCTREE = """

```{toctree}
:hidden:
:glob:
:caption: Guides

docs/*
```

```{toctree}
:hidden:
:glob:
:caption: Labs

labs/*/*
```
"""

CONFIG = {
    "project": "genlab",
    "html_title": "genlab",
    "extensions": ["myst_nb", "autograder.release.site"],
    "root_doc": "README",
    "html_theme": "sphinx_book_theme",
    # the book theme's download button would offer _sources/, which is not copied (the notebooks are pages)
    "html_theme_options": {"use_download_button": False, "show_toc_level": 2},
    "html_copy_source": False,
    "html_show_sourcelink": False,
    "html_math_renderer": "mathml",            # setup() below: LaTeX to MathML at build time, no script
    "myst_enable_extensions": ["dollarmath", "amsmath"],
    "myst_dmath_double_inline": True,          # $$...$$ inside a paragraph, as Jupyter reads it
    "myst_dmath_allow_space": False,           # "$ x$" is not math, as on GitHub (a "$ make" in a guide)
    "myst_heading_anchors": 4,                 # GitHub's #section links work
    "nb_execution_mode": "off",                # the notebooks as students receive them, never run
    "nb_ipywidgets_js": {},                    # myst-nb would load require.js and the widget manager from CDNs
    "suppress_warnings": ["myst.header"],      # notebooks start at "#" in every cell: Jupyter's habit
}


def stage(root: Path, src: Path) -> None:
    """The site's source, laid out as in the repository: README, docs/, and each lab's student notebook."""
    (src / "README.md").write_text((root / "README.md").read_text() + TOCTREE)
    if (root / "docs").is_dir():
        shutil.copytree(root / "docs", src / "docs")
    for lab in discover(root):
        if not lab.release.is_file():
            raise FileNotFoundError(f"{lab.release} is missing: `make release` writes it")
        target = src / "labs" / lab.id / lab.release.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lab.release, target)


def build(root: Path, out: Path, quiet: bool = True):
    """Builds the site of the course at ``root`` into ``out`` (replaced) and checks it (:func:`check`)."""
    from sphinx.application import Sphinx

    root, out = Path(root).resolve(), Path(out).resolve()
    if out == root or out in root.parents:
        raise ValueError(f"{out} holds the course itself: build the site into a folder of its own")
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "src")
        src.mkdir()
        stage(root, src)
        with warnings.catch_warnings():  # the extensions still call Sphinx APIs that Sphinx 11 removes
            warnings.filterwarnings("ignore", category=PendingDeprecationWarning,
                                    module="(myst_parser|myst_nb|sphinx_book_theme|pydata_sphinx_theme)")
            app = Sphinx(src, None, out, Path(tmp, "doctrees"), "html",
                         confoverrides={**CONFIG, "genlab_root": str(root)},
                         status=None if quiet else sys.stdout, warning=sys.stderr, freshenv=True)
            app.build()
    (out / "index.html").write_text('<!DOCTYPE html>\n<meta charset="utf-8">\n<title>genlab</title>\n'
                                    '<meta http-equiv="refresh" content="0; url=README.html">\n'
                                    '<a href="README.html">genlab</a>\n')
    return check(root, out)


def check(root: Path, site: Path):
    """The built site read back as the student bundle is: a :class:`autograder.release.bundle.StudentBundle` whose
    ``clean`` says that no page holds a solution, a near copy of one, or a hidden test line."""
    from autograder.release.bundle import StudentBundle, check as check_bundle

    with tempfile.TemporaryDirectory() as tmp:
        pages = []
        for page in sorted(Path(site).rglob("*")):
            name = page.relative_to(site)
            if page.suffix == ".html":
                target = Path(tmp, f"{name}.ipynb")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps(page_notebook(page.read_text(errors="replace"))))
                if "_static" not in name.parts:  # the themes' template macros are named .html too
                    pages.append(Path(site, name))
            elif page.suffix in (".py", ".ipynb", ".md", ".txt"):  # none expected; read as the bundle reads them
                target = Path(tmp, name)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(page, target)
        result = check_bundle(Path(root), StudentBundle(Path(tmp), wheel=None, notebooks=[]))  # a site has no wheel
    page = lambda where: where.replace(f"{tmp}/", "").replace(".html.ipynb", ".html")  # noqa: E731 - the page's name
    result.matches = [replace(m, closest=replace(m.closest, where=page(m.closest.where))) if m.closest else m
                      for m in result.matches]
    result.hidden_lines = [(line, page(where)) for line, where in result.hidden_lines]
    result.path, result.notebooks = Path(site), pages
    return result


class _Page(HTMLParser):
    """A page's code blocks (``<pre>``, one string each) and the rest of its text, by lines, as the bundle's
    check reads a notebook's code cells and its markdown."""
    BLOCKS = {"p", "div", "li", "br", "tr", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "section", "dt", "dd"}

    def __init__(self):
        super().__init__()
        self.code, self.text, self.depth = [], [""], 0   # depth: how many <pre> are open

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            if not self.depth:
                self.code.append("")
            self.depth += 1
        elif tag in self.BLOCKS and not self.depth:
            self.text.append("")

    def handle_endtag(self, tag):
        if tag == "pre" and self.depth:
            self.depth -= 1
        elif tag in self.BLOCKS and not self.depth:
            self.text.append("")

    def handle_data(self, data):
        if self.depth:
            self.code[-1] += data
        else:
            self.text[-1] += data


def page_notebook(html: str) -> dict:
    """A page as a notebook, for the bundle's check: its text as a markdown cell, each code block a code cell."""
    parser = _Page()
    parser.feed(html)
    parser.close()
    text = "\n".join(line for line in parser.text if line.strip())
    cell = lambda kind, source: {"cell_type": kind, "metadata": {}, "source": source,  # noqa: E731
                                 **({"outputs": [], "execution_count": None} if kind == "code" else {})}
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [cell("markdown", text)] + [cell("code", code) for code in parser.code]}


def summary(result) -> str:
    from autograder.release import leaks

    table = leaks.report(result.matches).splitlines()
    lines = [f"site: {result.path} ({len(result.notebooks)} pages); closest matches of the solutions:",
             *(table[:4] if result.clean else table)]
    lines += [f"hidden test line found: {line!r} in {where}" for line, where in result.hidden_lines]
    lines.append("clean: no solution, no near copy of one, no hidden test line" if result.clean
                 else "NOT CLEAN: do not publish this site")
    return "\n".join(lines)


# -- the Sphinx extension: formulas as MathML ----------------------------------------------------------------

def mathml(latex: str, display: str) -> str:
    """LaTeX as MathML (latex2mathml). As Sphinx's MathJax renderer does, lines (``\\\\``) of a display
    formula are set as a ``split``; ``aligned``, which latex2mathml does not read, is set as one too."""
    from latex2mathml.converter import convert

    latex = re.sub(r"\\(begin|end)\{aligned\}", r"\\\1{split}", latex.strip())
    if display == "block" and "\\\\" in latex and "\\begin" not in latex:
        latex = f"\\begin{{split}}{latex}\\end{{split}}"
    return convert(latex, display=display)


def _visit_math(self, node) -> None:
    self.body.append(_formula(self, node, "inline"))
    raise nodes.SkipNode


def _visit_displaymath(self, node) -> None:
    from sphinx.util.math import get_node_equation_number

    self.body.append(self.starttag(node, "div", CLASS="math"))
    if node.get("number"):
        self.body.append(f'<span class="eqno">({get_node_equation_number(self, node)})</span>')
    self.body.append(_formula(self, node, "block") + "</div>\n")
    raise nodes.SkipNode


def _formula(translator, node, display: str) -> str:
    try:
        return mathml(node.astext(), display)
    except Exception as error:  # noqa: BLE001 - a formula latex2mathml cannot read stays as readable LaTeX
        from sphinx.util import logging

        logging.getLogger(__name__).warning("formula not drawn (%s): %s", error, node.astext(), location=node)
        return f'<code class="math-latex">{translator.encode(node.astext())}</code>'


class _UnpublishedPaths(SphinxPostTransform):
    """A link to a file of the repository that the site does not publish (``autograder/release/leaks.py``, a lab's
    ``solutions/`` folder) keeps its text, unlinked; MyST would make it a link to a missing anchor. A link to a
    path that is nowhere in the repository is left to MyST, which warns (and tests/test_docs_site.py fails)."""
    default_priority = 8  # before MyST's resolver (9)

    def run(self, **kwargs) -> None:
        root = Path(self.config.genlab_root)
        folder = Path(self.env.doc2path(self.env.docname)).parent.relative_to(self.env.srcdir)
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst" or node.get("refdomain"):
                continue
            path = node["reftarget"].split("#")[0]
            if path and not path.startswith("/") and (root / folder / path).exists():
                node.replace_self(node.children)


def setup(app):
    app.add_html_math_renderer("mathml", (_visit_math, None), (_visit_displaymath, None))
    app.add_config_value("genlab_root", str(ROOT), "env")
    app.add_post_transform(_UnpublishedPaths)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, nargs="?", default=ROOT / "out" / "site", help="the site's folder")
    args = parser.parse_args(argv)
    start = time.monotonic()
    result = build(ROOT, args.out)
    print(summary(result))
    print(f"built in {time.monotonic() - start:.0f} s: open {args.out / 'index.html'}")
    return 0 if result.clean else 1


if __name__ == "__main__":
    sys.exit(main())
