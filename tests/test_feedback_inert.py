"""Issue 10: feedback pages are inert. Every active output a student can make is tried, each page opened in
headless Chromium (Debian's ``chromium``, ``--dump-dom``): no payload runs, and the student's plots still show.

Each payload in the sample ``lab1_attack_active_outputs`` (and in a markdown cell of the student's own, added
here) tries to set ``data-pw``+``ned-<kind>`` on ``<body>``; the attribute is built when the script runs, so
it is in the dumped DOM only if a payload ran. The same notebook rendered *without* genlab's sanitizer shows
the payloads running, so the check can fail.
"""
from __future__ import annotations

import base64
import io
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from autograder.wall import sandbox
from autograder.core.sanitize import CSP_META, clean_html, seal_page

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("GENLAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
REQUIRED = bool(os.environ.get("CI") or os.environ.get("GENLAB_REQUIRE_BROWSER"))
MARK = "data-pw" + "ned-"
SAMPLE = "lab1_attack_active_outputs"

# Raw HTML in a markdown cell of the student's own.
MARKDOWN_PAYLOADS = (
    "My notes.\n\n"
    "<script>document.body.setAttribute('data-pw' + 'ned-md-script', '1')</script>\n\n"
    "<img src=\"z\" onerror=\"document.body.setAttribute('data-pw' + 'ned-md-onerror', '1')\">\n\n"
    "<svg onload=\"document.body.setAttribute('data-pw' + 'ned-md-svg', '1')\"><circle r=\"3\"/></svg>\n\n"
    "<iframe src=\"https://example.com/track.png\"></iframe> <img src=\"https://example.com/pixel.png\">\n\n"
    "<a href=\"javascript:document.body.setAttribute('data-pw' + 'ned-md-href', '1')\">click</a>\n"
)


def _browser_missing() -> str:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/system-deps.sh installs it)"
    return ""


def _skip_or_fail(why: str):
    if REQUIRED:
        pytest.fail(f"{why}: CI must run the browser checks")
    pytest.skip(why)


def dump_dom(page: Path, profile: Path) -> str:
    """The DOM after the page loaded and its timers ran (virtual time), as headless Chromium sees it."""
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
                          "--virtual-time-budget=4000", "--dump-dom", page.resolve().as_uri()],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0 and "<body" in run.stdout, run.stderr[-2000:]
    return run.stdout


class _Elements(HTMLParser):
    """Every element and attribute of a page, as a browser's tokenizer reads them (text stays text)."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "iframe", "object", "embed", "form", "svg", "base", "meta", "link"):
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            value = (value or "").strip().lower()
            if name.startswith("on") or name == "srcdoc" or value.startswith("javascript:"):
                self.found.append(f"<{tag} {name}>")
            if name == "src" and not value.startswith("data:image/"):
                self.found.append(f"<{tag} src={value[:40]}>")


def active_markup(html: str) -> list[str]:
    parser = _Elements()
    parser.feed(html)
    return parser.found


def fired(dom: str) -> set[str]:
    return set(re.findall(re.escape(MARK) + r"([\w-]+)=", dom))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if sandbox.probe():
        pytest.skip(f"no sandbox here: {sandbox.probe()}")
    from autograder.core.limits import Limits
    from autograder.course.grade import grade_all
    from genlab.testing.notebook import grade_id

    tmp = tmp_path_factory.mktemp("inert")
    folder = tmp / "submitted" / SAMPLE / "lab1_vae"
    shutil.copytree(ROOT / "autograder" / "samples" / SAMPLE / "lab1_vae", folder)
    path = folder / "lab1_vae.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    where = next(i for i, c in enumerate(nb.cells) if grade_id(c) == "reparameterize")
    nb.cells.insert(where + 1, nbformat.v4.new_markdown_cell(MARKDOWN_PAYLOADS))
    nbformat.write(nb, str(path))
    out = tmp / "out"
    # graded without the policy for graded code, which would not run the payloads (they import base64 and io):
    # what is tested is the feedback page's wall
    [result] = grade_all(ROOT, tmp / "submitted", out, labs=["lab1_vae"], progress=False,
                         limits=Limits(policy_exempt=(SAMPLE,)))
    return out, result, tmp


def test_the_sample_keeps_full_marks(graded):
    _, result, _ = graded
    assert result.total == result.max_total, [(o.test, o.status, o.message) for o in result.outcomes]


def test_no_payload_runs_in_any_feedback_page(graded):
    if _browser_missing():
        _skip_or_fail(_browser_missing())
    out, _, tmp = graded
    pages = sorted((out / "feedback").rglob("*.html"))
    assert pages, "no feedback page was written"
    for page in pages:
        html = page.read_text()
        assert CSP_META in html.split("<body", 1)[0], f"{page}: no Content-Security-Policy in the head"
        assert fired(dump_dom(page, tmp / "profile")) == set(), page
        # The sanitizer is a wall of its own: without the CSP, still nothing runs.
        bare = tmp / "without-csp.html"
        bare.write_text(html.replace(CSP_META, ""))
        assert fired(dump_dom(bare, tmp / "profile")) == set(), f"{page} without its CSP"
        assert active_markup(html.split("<body", 1)[1]) == [], page


def test_the_same_notebook_unsanitized_runs_the_payloads(graded):
    """The check above can fail: nbconvert's page of the raw graded notebook runs the student's scripts."""
    if _browser_missing():
        _skip_or_fail(_browser_missing())
    from nbconvert import HTMLExporter

    _, result, tmp = graded
    raw = tmp / "raw.html"
    raw.write_text(HTMLExporter().from_notebook_node(result.notebook)[0])
    ran = fired(dump_dom(raw, tmp / "profile"))
    assert {"script", "onerror", "javascript", "md-script", "md-onerror"} <= ran, ran
    # genlab's seal on that same raw page (no notebook-level cleaning at all) stops every one of them.
    sealed = tmp / "sealed.html"
    sealed.write_text(seal_page(raw.read_text()))
    assert fired(dump_dom(sealed, tmp / "profile")) == set()


def test_the_plots_still_show(graded):
    if _browser_missing():
        _skip_or_fail(_browser_missing())
    from PIL import Image

    out, _, tmp = graded
    [page] = (out / "feedback").rglob("*.html")
    dom = dump_dom(page, tmp / "profile")
    pngs = re.findall(r'<img[^>]* src="data:image/png;base64,([A-Za-z0-9+/=]+)"', dom)
    assert pngs, "the PNG plot is not in the page"
    assert Image.open(io.BytesIO(base64.b64decode(pngs[0]))).size[0] >= 100
    svgs = re.findall(r'<img[^>]* src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', dom)
    assert svgs, "the SVG plot is not in the page"
    drawings = [ET.fromstring(base64.b64decode(s)) for s in svgs]   # well-formed XML, or an image shows nothing
    assert any(len(d.findall(".//{http://www.w3.org/2000/svg}path")) > 5 for d in drawings)
    for svg in svgs:
        text = base64.b64decode(svg).decode()
        assert "onload" not in text and "<script" not in text


def test_the_notebook_handed_back_is_inert_too(graded):
    out, _, _ = graded
    [path] = (out / "autograded").rglob("*.ipynb")
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            assert "application/javascript" not in data and "image/svg+xml" not in data
            html = "".join(data.get("text/html", ""))
            assert "<script" not in html and "onerror" not in html and "srcdoc" not in html


@pytest.mark.parametrize("payload", [
    "<script>alert(1)</script>", '<img src="x" onerror="alert(1)">', '<details open ontoggle="alert(1)">',
    '<iframe srcdoc="&lt;script&gt;alert(1)&lt;/script&gt;"></iframe>', '<a href="javascript:alert(1)">x</a>',
    '<svg onload="alert(1)"></svg>', '<img src="https://example.com/x.png">', '<form action="https://x"><input>',
    '<object data="x.swf"></object>', '<a href="data:text/html,&lt;script&gt;alert(1)&lt;/script&gt;">x</a>',
])
def test_clean_html_leaves_nothing_active(payload):
    cleaned = clean_html(payload)
    for active in ("<script", "onerror", "ontoggle", "onload", "srcdoc", "javascript:", "<iframe", "<svg",
                   "https://example.com", "<form", "<object", "data:text/html", "alert(1)<"):
        assert active not in cleaned, (payload, cleaned)


def test_clean_html_keeps_data_images():
    png = '<img src="data:image/png;base64,iVBORw0KGgo=" alt="plot">'
    assert 'src="data:image/png;base64,iVBORw0KGgo="' in clean_html(png)
