"""``make docs`` (autograder/release/site.py): the course as a static site, read the way a visitor reads it.

The site is built once into a temporary folder, then:
- the home page, every guide and every lab are opened in Chromium, served from 127.0.0.1 with every other
  address refused: each formula is MathML that Chromium lays out, no ``$...$`` is left in the text, and no page
  asks for anything remote;
- every link and every resource of every built page points to a file of the site (and an anchor on it);
- the site is clean as the student bundle is (no solution, no near copy of one, no hidden test line), and a
  solution and a hidden test line planted in a lab notebook before a build are both found.
"""
from __future__ import annotations

import functools
import http.server
import json
import re
import threading
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autograder.release import site as docs
from autograder.release.bundle import hidden_test_lines
from autograder.core.labs import discover
from test_browser import reference_sources, screenshot_on_failure

ROOT = Path(__file__).resolve().parents[1]
LABS = [lab.id for lab in discover(ROOT)]

pytestmark = pytest.mark.slow  # two builds of the site: 9 s and 3 s on two free cores, 25-35 s on busy ones


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs") / "site"
    return out, docs.build(ROOT, out)


def pages(site_dir: Path) -> list[Path]:
    """The site's pages (the themes' _static/ holds template macros named .html too)."""
    return sorted(p for p in site_dir.rglob("*.html") if "_static" not in p.relative_to(site_dir).parts)


class _Refs(HTMLParser):
    """Every URL a page links to or loads (tag, attribute, URL), and every id on it."""
    LOADS = {("script", "src"), ("link", "href"), ("img", "src"), ("iframe", "src"), ("source", "src"),
             ("video", "src"), ("audio", "src"), ("embed", "src"), ("object", "data"), ("image", "href")}

    def __init__(self):
        super().__init__()
        self.refs, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            elif value and (name in ("href", "src", "data", "poster") or (tag, name) in self.LOADS):
                self.refs.append((tag, name, value))
            elif name == "srcset" and value:
                self.refs += [(tag, name, part.split()[0]) for part in value.split(",") if part.strip()]


@functools.cache
def parsed(path: Path) -> _Refs:
    parser = _Refs()
    parser.feed(path.read_text())
    return parser


def test_make_docs_builds_this_repository():
    """`make docs` runs the module with no root: it must find this checkout from where the module lives."""
    assert docs.ROOT == ROOT


def test_site_has_every_lab_and_guide_and_is_clean(site):
    site_dir, result = site
    assert result.clean, docs.summary(result)
    built = {p.relative_to(site_dir).as_posix() for p in pages(site_dir)}
    expected = {"index.html", "README.html"} | {f"labs/{lab}/{lab}.html" for lab in LABS} \
        | {f"docs/{p.stem}.html" for p in (ROOT / "docs").glob("*.md")}
    assert expected <= built, expected - built
    # the code cells are there, as students receive them: the stubs, never the reference
    lab = (site_dir / "labs" / LABS[0] / f"{LABS[0]}.html").read_text()
    assert "NotImplementedError" in lab and "BEGIN SOLUTION" not in lab and "HIDDEN TESTS" not in lab


def test_every_internal_link_resolves_and_nothing_remote_is_loaded(site):
    site_dir, _ = site
    broken, remote = [], []
    for page in pages(site_dir):
        for tag, attribute, url in parsed(page).refs:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme or url.startswith("//"):
                if (tag, attribute) != ("a", "href") and parts.scheme != "data":
                    remote.append(f"{page.relative_to(site_dir)}: <{tag} {attribute}={url}>")
                continue
            target = (page.parent / urllib.parse.unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file() or site_dir.resolve() not in target.parents:
                broken.append(f"{page.relative_to(site_dir)}: {url} (no file)")
            elif parts.fragment and target.suffix == ".html" \
                    and urllib.parse.unquote(parts.fragment) not in parsed(target).ids:
                broken.append(f"{page.relative_to(site_dir)}: {url} (no such anchor)")
    assert not broken, "\n".join(broken)
    assert not remote, "\n".join(remote)


@pytest.fixture(scope="module")
def served(site):
    """The site over HTTP on 127.0.0.1, as a static host serves it."""
    site_dir, _ = site
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


# The page's text outside code and formulas, where a "$...$" would be LaTeX that was never drawn.
PROSE = """() => { const main = document.querySelector('main') || document.body; const copy = main.cloneNode(true);
  copy.querySelectorAll('pre, code, math, script, style').forEach(e => e.remove()); return copy.textContent; }"""
# Each formula: parsed by Chromium as MathML; and each fraction on view drawn as one, its numerator above its
# denominator (MathML laid out, not its letters in a row as unknown elements would be).
FORMULAS = """() => [...document.querySelectorAll('math')].map(m => m instanceof MathMLElement)"""
FRACTIONS = """() => [...document.querySelectorAll('mfrac')].filter(f => f.checkVisibility()).map(f =>
  f.children[0].getBoundingClientRect().bottom <= f.children[1].getBoundingClientRect().top + 1)"""


def test_pages_render_math_offline_in_chromium(site, served, browser, tmp_path):
    site_dir, _ = site
    guides = sorted(p.relative_to(site_dir).as_posix() for p in (site_dir / "docs").glob("*.html"))
    for path in ["index.html", *guides, *(f"labs/{lab}/{lab}.html" for lab in LABS)]:
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        remote = []
        page.route(re.compile(r"^(?!http://127\.0\.0\.1[:/]|data:|blob:).*"),
                   lambda route: (remote.append(route.request.url), route.abort()))
        failed = []
        page.on("requestfailed", lambda request: failed.append(request.url))
        try:
            with screenshot_on_failure(page, tmp_path / f"{path.replace('/', '_')}.png"):
                response = page.goto(f"{served}/{path}", wait_until="load")
                assert response.ok, (path, response.status)
                if path == "index.html":  # sends the reader to the home page, the README
                    page.wait_for_url(f"{served}/README.html")
                    page.wait_for_load_state("load")
                title = page.title()
                assert "genlab" in title, (path, title)
                assert not remote, f"{path} asked for remote resources: {remote}"
                assert not failed, f"{path}: requests failed: {failed}"
                text = page.evaluate(PROSE)
                raw = re.findall(r"\$[^$\n]{1,80}\$", text)
                assert not raw, f"{path}: LaTeX left undrawn: {raw[:5]}"
                assert page.locator("code.math-latex").count() == 0, f"{path}: a formula latex2mathml could not read"
                formulas, fractions = page.evaluate(FORMULAS), page.evaluate(FRACTIONS)
                if path.startswith(("labs/", "docs/notation")):
                    assert len(formulas) > 20, (path, len(formulas))
                if path.startswith("labs/"):
                    assert fractions, f"{path}: no fraction on view"
                assert all(formulas), f"{path}: <math> not parsed as MathML"
                assert all(fractions), f"{path}: {fractions.count(False)} fractions not drawn as fractions"
        finally:
            page.close()


def test_a_planted_solution_or_hidden_test_line_is_found(tmp_path):
    """A solution cell's reference, and a line of a hidden test, written into released notebooks before the
    build: the site's check finds both, and names the page."""
    root = tmp_path / "course"
    root.mkdir()
    for name in ("docs", "shared"):
        (root / name).symlink_to(ROOT / name)
    first, last = LABS[0], LABS[-1]
    for lab in {first, last}:  # two labs are enough, and build in half the time
        (root / "solutions").mkdir(exist_ok=True)
        (root / "solutions" / lab).symlink_to(ROOT / "solutions" / lab)
    # a link to a file the site does not publish keeps its text and links nowhere: nothing of solutions/ is copied
    (root / "README.md").write_text((ROOT / "README.md").read_text()
                                    + f"\n\nThe [reference](solutions/{first}/{first}.ipynb) stays out.\n")
    for lab in {first, last}:
        (root / "labs" / lab).mkdir(parents=True)
        (root / "labs" / lab / f"{lab}.ipynb").write_bytes((ROOT / "labs" / lab / f"{lab}.ipynb").read_bytes())

    grade_id, solution = max(reference_sources(first).items(), key=lambda item: len(item[1]))
    function = re.search(r"^def (\w+)", solution, re.M)[1]
    notebook_path = root / "labs" / first / f"{first}.ipynb"
    nb = json.loads(notebook_path.read_text())
    (cell,) = [c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id]
    cell["source"] = solution
    notebook_path.write_text(json.dumps(nb))

    hidden = sorted(hidden_test_lines(root))[0]
    notebook_path = root / "labs" / last / f"{last}.ipynb"
    nb = json.loads(notebook_path.read_text())
    nb["cells"].append({"id": "planted", "cell_type": "code", "metadata": {}, "source": hidden, "outputs": [],
                        "execution_count": None})
    notebook_path.write_text(json.dumps(nb))

    result = docs.build(root, tmp_path / "site")
    home = (tmp_path / "site" / "README.html").read_text()
    assert "The reference stays out." in re.sub(r"<[^>]+>", "", home) \
        and not re.search(r'(href|src)="[^"]*solutions/', home)
    assert not [p for p in (tmp_path / "site").rglob("*") if p.suffix == ".ipynb"]
    assert not result.clean
    assert [m.closest.where for m in result.leaks if m.solution.name == function] \
        and all(f"labs/{first}/{first}.html" in m.closest.where for m in result.leaks), docs.summary(result)
    assert (hidden, f"labs/{last}/{last}.html") in result.hidden_lines, result.hidden_lines
