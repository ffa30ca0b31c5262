"""Feedback pages are inert: nothing a student's notebook produced runs as script when a page is opened.

A student's outputs (HTML, SVG, JavaScript, Markdown) and raw HTML in their own markdown cells would
otherwise be embedded as they are, and a TA opening the page, or a course site serving it, would run the
student's JavaScript. Two walls, both built from libraries rather than a hand-written filter:

1. :func:`inert_notebook`, before nbconvert/nbgrader render a notebook: outputs keep only passive types
   (JavaScript and widget outputs are dropped, so their plain-text fallback shows); HTML outputs are cleaned
   with nh3 (the Ammonia sanitizer); an SVG is cleaned with nh3 too and then shown as an ``<img>`` of a
   ``data:`` URL, where a browser never runs script nor loads anything.
2. :func:`seal_page`, on every HTML page written: the page's body, where the student's rendered markdown and
   outputs are, is cleaned again with nh3 (no script, no ``on*`` handler, no ``javascript:`` URL, no iframe,
   no form, images only from ``data:`` URLs), and a Content-Security-Policy meta tag that forbids every
   script and every remote load goes first in the head (on feedback pages with a second one, allowing only the
   head's own stylesheets by their sha256: the template's and the grader's). Before that, the LaTeX of the
   rendered markdown is drawn as MathML (:func:`render_math`, with latex2mathml), which browsers render
   without script; the allow-list admits MathML's presentation elements, never ``href``, ``maction`` or
   ``annotation-xml``.

PNG and JPEG plots still display (``data:`` images), and so do SVG plots, after cleaning.
"""
from __future__ import annotations

import base64
import copy
import functools
import hashlib
import html
import re
from pathlib import Path

import nh3

# No script of any kind, nothing loaded from anywhere but the page itself: images are data: URLs, styles are
# the template's inline ones (a feedback page narrows them to its head's own, by hash: style_policy). Placed
# first in <head>, before anything it governs.
CSP = ("default-src 'none'; script-src 'none'; object-src 'none'; frame-src 'none'; child-src 'none'; "
       "connect-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; media-src data:; "
       "base-uri 'none'; form-action 'none'")
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'

# Output types that are only ever displayed. Everything else (application/javascript, widget views, any
# vendor type a renderer might execute) is dropped; a display's text/plain fallback then shows instead.
PASSIVE = {"text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg", "image/gif",
           "image/svg+xml", "application/json"}
IMAGE_DATA = re.compile(r"^data:image/(png|jpeg|gif|svg\+xml);base64,[A-Za-z0-9+/=\s]*$")

# HTML: Ammonia's default tags (no script, style, iframe, object, form, svg...), plus the attributes
# nbconvert's templates and plots need to look right. ``style`` is left out: it can load remote resources.
HTML_ATTRIBUTES = {"*": {"class", "id", "title", "lang", "dir", "align"},
                   "a": {"href"}, "img": {"src", "alt", "width", "height"},
                   "td": {"colspan", "rowspan"}, "th": {"colspan", "rowspan", "scope"}, "ol": {"start"}}

# SVG: shapes, text, groups, clipping, gradients and references inside the drawing (``#id``); no script,
# no event handler, no foreignObject (which can hold HTML), no external href (url_schemes is empty, so only
# relative references such as matplotlib's ``<use xlink:href="#m0">`` remain).
SVG_TAGS = {"svg", "g", "path", "rect", "circle", "ellipse", "line", "polyline", "polygon", "text", "tspan",
            "defs", "clipPath", "use", "title", "desc", "linearGradient", "radialGradient", "stop", "symbol",
            "marker", "mask", "pattern"}
SVG_ATTRIBUTES = {"*": {"id", "class", "style", "transform", "fill", "fill-opacity", "fill-rule", "stroke",
                        "stroke-width", "stroke-opacity", "stroke-linecap", "stroke-linejoin", "stroke-dasharray",
                        "opacity", "clip-path", "clip-rule", "mask", "d", "x", "y", "dx", "dy", "width", "height",
                        "viewBox", "preserveAspectRatio", "xmlns", "xmlns:xlink", "version", "points", "cx",
                        "cy", "r", "rx", "ry", "x1", "x2", "y1", "y2", "offset", "stop-color", "stop-opacity",
                        "gradientUnits", "gradientTransform", "patternUnits", "clipPathUnits", "markerWidth",
                        "markerHeight", "refX", "refY", "orient", "href", "xlink:href", "font-size",
                        "font-family", "font-weight", "font-style", "text-anchor", "dominant-baseline"}}


# MathML (what latex2mathml writes for the pages' formulas): presentation elements and the attributes that
# change only how they are drawn. No href, no event handler, no annotation-xml (which can carry HTML).
MATH_TAGS = {"math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msub", "msup", "msubsup", "mfrac",
             "msqrt", "mroot", "mover", "munder", "munderover", "mtable", "mtr", "mtd", "mstyle", "mpadded",
             "mphantom", "menclose", "mmultiscripts", "mprescripts", "none", "semantics", "annotation"}
_DRAWN = {"mathvariant", "displaystyle", "scriptlevel"}
MATH_ATTRIBUTES = {"math": {"xmlns", "display"} | _DRAWN, "mi": _DRAWN, "mn": _DRAWN, "mtext": _DRAWN,
                   "mrow": _DRAWN, "mstyle": _DRAWN | {"scriptminsize", "scriptsizemultiplier"},
                   "mo": _DRAWN | {"stretchy", "fence", "separator", "lspace", "rspace", "minsize", "maxsize",
                                   "largeop", "movablelimits", "symmetric", "form", "accent"},
                   "mspace": {"width", "height", "depth"}, "mfrac": {"linethickness"}, "mover": {"accent"},
                   "munder": {"accentunder"}, "munderover": {"accent", "accentunder"},
                   "mtable": {"columnalign", "rowalign", "columnspacing", "rowspacing", "columnlines",
                              "rowlines", "displaystyle"},
                   "mtr": {"columnalign", "rowalign"}, "mtd": {"columnalign", "rowalign", "columnspan", "rowspan"},
                   "mpadded": {"width", "height", "depth", "lspace", "voffset"}, "menclose": {"notation"},
                   "annotation": {"encoding"}}
PAGE_TAGS = nh3.ALLOWED_TAGS | MATH_TAGS
PAGE_ATTRIBUTES = {**MATH_ATTRIBUTES, **HTML_ATTRIBUTES}

# Math in rendered markdown: $$...$$ and \[...\] are display formulas, $...$ and \(...\) inline ones, as
# Jupyter's renderer reads them. Only text between tags is searched, never <pre> or <code> (code is not math).
_NOT_TEXT = re.compile(r"(<pre\b.*?</pre>|<code\b.*?</code>|<math\b.*?</math>|<script\b.*?</script>|"
                       r"<style\b.*?</style>|<[^>]*>)", re.DOTALL | re.IGNORECASE)
# _MATH defines what a formula is; _formulas finds the same spans in linear time (tests/test_feedback_math.py
# compares the two on random texts).
_MATH_START = re.compile(r"[$\\]")   # where a formula may start: every delimiter begins with $ or \
_MATH = re.compile(r"\$\$(?P<d1>.+?)\$\$|\\\[(?P<d2>.+?)\\\]|\\\((?P<i2>.+?)\\\)|"
                   r"(?<![\\$])\$(?P<i1>[^$]+?)(?<![\\ ])\$(?!\$)", re.DOTALL)


def _mathml(latex: str, display: bool, source: str) -> str:
    converted = _converted(latex, display)
    return source if converted is None else converted   # a formula the converter cannot read stays as LaTeX


@functools.lru_cache(maxsize=8192)
def _converted(latex: str, display: bool) -> str | None:
    """The MathML of one formula, None where the converter cannot read it. Cached per process, by the formula's
    text: the pages of a lab repeat the lab's formulas, 243 per page on average over the suite's 202 sample
    pages, and converting them was most of the time spent sealing a page. The MathML is a function
    of the formula's text alone, so a cached entry is what converting it again would give."""
    from latex2mathml.converter import convert

    try:
        return convert(html.unescape(latex).strip(), display="block" if display else "inline")
    except Exception:  # noqa: BLE001 - unreadable LaTeX: the caller keeps the source
        return None


def _formulas(text: str) -> list[tuple[int, int, str, bool]]:
    """(start, end, LaTeX, display) of every formula :data:`_MATH` finds in ``text``, found in linear time.

    ``_MATH.sub`` itself searches from every opening delimiter to the end of the text for its closing one, so
    a text of unclosed ``\\(`` costs the square of its length: 7.47 s to seal Lab 1's page with a 100 kB output of
    them, against 0.07 s without it (issue 39, measured on this 2-core EPYC). Here a closing delimiter not found
    from one place is known to be absent from every later place, so each part of the text is searched a bounded
    number of times."""
    found, at, n = [], 0, len(text)
    absent: dict[str, int] = {}   # closing delimiter -> the place after which it does not occur

    def close(delimiter: str, start: int) -> int:
        if start >= absent.get(delimiter, n + 1):
            return -1
        where = text.find(delimiter, start)
        if where < 0:
            absent[delimiter] = start
        return where

    while True:
        candidate = _MATH_START.search(text, at)
        if candidate is None:
            return found
        at = candidate.start()
        span = None
        for opening, closing, display in (("$$", "$$", True), ("\\[", "\\]", True), ("\\(", "\\)", False)):
            if text.startswith(opening, at):
                end = close(closing, at + 3)   # at least one character between the delimiters
                if end >= 0:
                    span = (at, end + 2, text[at + 2:end], display)
                break
        if span is None and text[at] == "$" and (at == 0 or text[at - 1] not in "\\$"):
            # $...$: no dollar inside, and the closing one neither escaped, after a space, nor doubled
            end = text.find("$", at + 1)
            if end > at + 1 and text[end - 1] not in "\\ " and not text.startswith("$", end + 1):
                span = (at, end + 1, text[at + 1:end], False)
        if span is None:
            at += 1
            continue
        found.append(span)
        at = span[1]


def _render_formulas(text: str) -> str:
    parts, last = [], 0
    for start, end, latex, display in _formulas(text):
        parts += [text[last:start], _mathml(latex, display, text[start:end])]
        last = end
    return "".join(parts) + text[last:]


def render_math(html_text: str) -> str:
    """LaTeX formulas of rendered markdown as MathML, which browsers draw without any script (MathML Core)."""
    parts = _NOT_TEXT.split(html_text)
    return "".join(part if i % 2 else _render_formulas(part) for i, part in enumerate(parts))


def _only_data_images(tag: str, attribute: str, value: str) -> str | None:
    """nh3 attribute filter: an image may come from a data: URL only (no remote load); a link never may."""
    if tag == "img" and attribute == "src":
        return value if IMAGE_DATA.match(value) else None
    if attribute == "href" and value.strip().lower().startswith("data:"):
        return None
    return value


def clean_html(html: str) -> str:
    """An HTML fragment with nothing active left in it (see the module's docstring)."""
    return nh3.clean(html, attributes=HTML_ATTRIBUTES, attribute_filter=_only_data_images,
                     url_schemes={"http", "https", "mailto", "data"}, link_rel="noopener noreferrer nofollow")


def clean_page_body(html: str) -> str:
    """A page's body: formulas drawn as MathML (:func:`render_math`), then cleaned as :func:`clean_html`
    cleans, with the MathML elements and attributes above allowed too."""
    return nh3.clean(render_math(html), tags=PAGE_TAGS, attributes=PAGE_ATTRIBUTES,
                     attribute_filter=_only_data_images, url_schemes={"http", "https", "mailto", "data"},
                     link_rel="noopener noreferrer nofollow")


def clean_svg(svg: str) -> str:
    """An SVG document with only drawing elements and in-document references left."""
    drawing = nh3.clean(svg, tags=SVG_TAGS, attributes=SVG_ATTRIBUTES, url_schemes=set(), link_rel=None)
    # The cleaned drawing must stay well-formed XML, or the image shows nothing: html5ever writes a no-break
    # space as an HTML entity, and drops the xmlns:xlink declaration, so references use SVG 2's plain href.
    return drawing.replace("&nbsp;", "&#160;").replace(" xlink:href=", " href=").strip()


def svg_as_image(svg: str) -> str:
    """The cleaned SVG as an <img> of a data: URL: in an image a browser runs no script and loads nothing."""
    data = base64.b64encode(clean_svg(svg).encode()).decode()
    return f'<img src="data:image/svg+xml;base64,{data}" alt="SVG figure">'


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


# -- what a page renders as Markdown (issue 39) -----------------------------------------------------------------
# nbconvert renders Markdown with mistune, whose math rules search from every opening delimiter to the end of
# the text for its closing one: one output of 100 kB of unclosed \( (the Markdown source \\( repeated) took
# 19.98 s to render, against 0.63 s for the whole page of Lab 1's release without it (measured on this 2-core
# EPYC, issue 39; tests/test_feedback_math.py times the two pages against each other). So the Markdown a
# student's notebook makes (outputs, and markdown cells the student wrote) is rendered as Markdown only within
# a budget; beyond it, it is shown as plain text, cut, with a note saying why. Rendering then costs at most
# about MARKDOWN_CHARS x MATH_DELIMITERS per text, and PAGE_MARKDOWN_CHARS of such text per page.
MARKDOWN_CHARS = 20_000          # one Markdown text (an output, or a markdown cell the student wrote)
MATH_DELIMITERS = 400            # $, \(, \[ and \begin in one Markdown text
PAGE_MARKDOWN_CHARS = 200_000    # Markdown rendered from the student's outputs and cells, on one page


def _delimiters(text: str) -> int:
    return sum(text.count(d) for d in ("$", "\\(", "\\[", "\\begin"))


class RenderBudget:
    """What one feedback page still renders as Markdown (:data:`PAGE_MARKDOWN_CHARS`)."""

    def __init__(self, page_chars: int = PAGE_MARKDOWN_CHARS):
        self.left = page_chars

    def refuse(self, text: str) -> str:
        """'' when ``text`` may be rendered as Markdown (its length is then spent), else the note that goes
        with it shown as plain text."""
        reasons = []
        if len(text) > MARKDOWN_CHARS:
            reasons.append(f"it has {len(text):,} characters, over {MARKDOWN_CHARS:,}")
        if _delimiters(text) > MATH_DELIMITERS:
            reasons.append(f"it has {_delimiters(text):,} math delimiters, over {MATH_DELIMITERS:,}")
        if not reasons and len(text) > self.left:
            reasons.append(f"the page has already rendered {PAGE_MARKDOWN_CHARS - self.left:,} of the "
                           f"{PAGE_MARKDOWN_CHARS:,} characters of Markdown it renders from your notebook")
        if not reasons:
            self.left -= len(text)
            return ""
        cut = f", cut to its first {MARKDOWN_CHARS:,} characters" if len(text) > MARKDOWN_CHARS else ""
        return f"[genlab: this Markdown is shown as plain text{cut}: {'; '.join(reasons)}]"


def inert_outputs(outputs: list, budget: RenderBudget | None = None) -> list:
    budget = budget or RenderBudget()
    for output in outputs:
        data = output.get("data")
        if not isinstance(data, dict):
            continue
        for mime in [m for m in data if m not in PASSIVE]:
            del data[mime]
        if "image/svg+xml" in data:
            svg = _text(data.pop("image/svg+xml"))
            data.setdefault("text/html", svg_as_image(svg))
        if "text/html" in data:
            data["text/html"] = clean_html(_text(data["text/html"]))
        if "text/markdown" in data:
            markdown = _text(data["text/markdown"])
            note = budget.refuse(markdown)
            if note:   # plain text is drawn escaped, in linear time
                del data["text/markdown"]
                data["text/plain"] = markdown[:MARKDOWN_CHARS] + "\n" + note
        if not data:
            data["text/plain"] = "[genlab: an output that only a browser script could show was removed]"
    return outputs


def _from_release(cell) -> bool:
    """A locked cell that is not an answer: the grader took it from the release (assemble), not the student."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("locked")) and not meta.get("solution")


# A markdown cell shown as plain text: an HTML block that mistune passes through unparsed, and the note.
_SHOWN_AS_TEXT = re.compile(r"<pre>[^<]*</pre>\n\n\[genlab: this Markdown is shown as plain text[^\n<]{0,500}\]\n")


def inert_notebook(nb):
    """A copy of ``nb`` whose outputs are inert (markdown cells are cleaned on the rendered page), and whose
    Markdown from the student stays within one page's :class:`RenderBudget`."""
    nb = copy.deepcopy(nb)
    budget = RenderBudget()
    for cell in nb.cells:
        if cell.get("cell_type") == "code":
            inert_outputs(cell.get("outputs", []), budget)
        elif cell.get("cell_type") == "markdown" and not _from_release(cell):
            source = _text(cell.get("source", ""))
            if _SHOWN_AS_TEXT.fullmatch(source):   # made so by an earlier run (genlab feedback renders again)
                continue
            note = budget.refuse(source)
            if note:   # a <pre> block: mistune passes it through unparsed, and seal_page renders no math in it
                cell.source = f"<pre>{html.escape(source[:MARKDOWN_CHARS])}</pre>\n\n{html.escape(note)}\n"
    return nb


_STYLE_ELEMENT = re.compile(r"<style\b[^>]*>(.*?)</style\s*>", re.DOTALL | re.IGNORECASE)


def style_policy(head: str) -> str:
    """A second Content-Security-Policy, for styles only: the page's head's own ``<style>`` elements (the
    template's and the grader's stylesheet), each allowed by the sha256 of its exact text. A browser enforces
    both policies, so no other style applies: no ``<style>`` element or ``style`` attribute that reached the
    body (nh3 removes them) and no ``'unsafe-inline'``."""
    hashes = sorted({"'sha256-" + base64.b64encode(hashlib.sha256(m[1].encode()).digest()).decode() + "'"
                     for m in _STYLE_ELEMENT.finditer(head)})
    sources = " ".join(hashes) or "'none'"
    return f'<meta http-equiv="Content-Security-Policy" content="style-src {sources}">'


def seal_page(page: str, stylesheet: str | None = None) -> str:
    """An HTML page with its body cleaned and a CSP that forbids script placed first in its head; with a
    ``stylesheet`` (the grader's own, never a student's text), that stylesheet last in the head, and only the
    head's styles allowed (:func:`style_policy`). A page sealed before keeps its head."""
    head, body_open, rest = page.partition("<body")
    if not body_open:  # not a whole page: the fragment itself is what must be clean
        return CSP_META + clean_page_body(page)
    tag_end = rest.index(">") + 1
    inner, body_close, tail = rest[tag_end:].rpartition("</body>")
    body = body_open + rest[:tag_end] + clean_page_body(inner) + body_close + tail
    if CSP_META not in head:
        if stylesheet is not None:
            head = head.replace("</head>", f"<style>{stylesheet}</style>\n</head>", 1)
            policies = CSP_META + "\n" + style_policy(head)
        else:
            policies = CSP_META
        head = re.sub(r"<head[^>]*>", lambda m: m.group(0) + "\n" + policies, head, count=1)
    return head + body


def seal_pages(folder: Path, stylesheet: str | None = None) -> int:
    """Seals every ``*.html`` under ``folder`` in place (:func:`seal_page`); returns how many were sealed."""
    pages = sorted(Path(folder).rglob("*.html")) if Path(folder).is_dir() else []
    for path in pages:
        path.write_text(seal_page(path.read_text(), stylesheet))
    return len(pages)


# -- text the student's kernel sends (error messages, tracebacks, names) ---------------------------------
# Terminal escapes (CSI, OSC and two-byte ESC sequences, and the 8-bit CSI), then every other control
# character but newline and tab: C0, DEL, C1, the bidirectional overrides and the Unicode line separators.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?|\x9b[0-?]*[ -/]*[@-~]")
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def student_text(text, limit: int = 4000) -> str:
    """``text`` (from a student's kernel) made safe to show: CR-LF becomes a newline, terminal escapes and
    control characters other than newline and tab are dropped, and it is cut to ``limit`` characters."""
    text = _CONTROLS.sub("", _ESCAPES.sub("", str(text).replace("\r\n", "\n")))
    if len(text) > limit:
        text = text[:limit] + f" [... {len(text) - limit} more characters cut by the grader]"
    return text


def quoted(text: str, prefix: str = "  | ") -> str:
    """Every line of the student's text behind a marker, so none can pass for one of the grader's own lines
    (``[genlab grader] ... PASSED``)."""
    return "\n".join(prefix + line for line in (text.split("\n") if text else [""]))
