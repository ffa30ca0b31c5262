"""The HTML exporter of the feedback pages: nbconvert's, without its second parse of every page.

nbconvert's ``HTMLExporter.from_notebook_node`` renders the template, then reads the whole page again with
BeautifulSoup's pure-Python parser, to give images without one an alt text and JupyterLab-template cells a
``tabindex``. On a Lab 1 feedback page (about 330 KB: every cell of the notebook, highlighted) that second parse
was 60% of the page's CPU time (6.35 against 2.57 CPU seconds for 6 pages, measured on this 2-core machine,
issue 19), and every graded notebook gets a page. The ``tabindex`` selectors match nothing in nbgrader's
feedback template (it extends the classic one), and the alt text is added here as the rendered page leaves the
template. The page's body is then cleaned by nh3 (:func:`autograder.core.sanitize.seal_page`), which writes it out
anew: the sealed pages of the two exporters differ only in attribute order and whitespace (compared on the 6
pages). Used by :func:`autograder.course.feedback._feedback_pages` as nbgrader's ``GenerateFeedback.exporter_class``.

Two caches, per process, keyed by content, so that a process drawing many pages (one per task in
``write_outputs``' pool) does the same work once: the syntax highlighting of a cell, keyed by its whole source,
its language and the formatter's options (the notebooks of a lab share most of their cells: the lab's own text,
setup and tests), and the compiled Jinja templates (jinja2's bytecode cache: keyed by the template's name and
checked against a hash of its source). nbgrader makes a new exporter, so a new Jinja environment, for each page;
without the caches every page highlighted every cell and compiled every template again (about half and a sixth
of a page's CPU time, sampled with py-spy). A cached value is what the same call returns: a pure
function of its key, so no page can change what another shows.
"""
from __future__ import annotations

import json
import re
from collections import OrderedDict

from jinja2 import BytecodeCache
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

NO_ALT = "No description has been provided for this image"  # nbconvert's own words for it
_IMG_WITHOUT_ALT = re.compile(r"<img(?![^>]*\salt=)", re.IGNORECASE)


class _BoundedCache(OrderedDict):
    """Least recently used entries dropped beyond ``limit``."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def put(self, key, value) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


_HIGHLIGHTED = _BoundedCache(20_000)   # (source, language, lexer, magics language, options) -> HTML


class CachedHighlight2HTML(Highlight2HTML):
    """nbconvert's highlighting filter, each distinct call computed once per process."""

    def __call__(self, source, language=None, metadata=None):
        key = (source, language or "", self.pygments_lexer, (metadata or {}).get("magics_language", ""),
               json.dumps(self.extra_formatter_options, sort_keys=True, default=repr))
        html = _HIGHLIGHTED.get(key)
        if html is None:
            html = super().__call__(source, language, metadata)
            _HIGHLIGHTED.put(key, html)
        else:
            _HIGHLIGHTED.move_to_end(key)
        return html


class _MemoryBytecodeCache(BytecodeCache):
    """jinja2's bytecode cache in this process's memory: a template is compiled once, not once per page."""

    def __init__(self):
        self.code: dict[str, bytes] = {}

    def load_bytecode(self, bucket) -> None:
        if bucket.key in self.code:
            bucket.bytecode_from_string(self.code[bucket.key])   # jinja2 drops it if the source's hash differs

    def dump_bytecode(self, bucket) -> None:
        self.code[bucket.key] = bucket.bytecode_to_string()


_BYTECODE = _MemoryBytecodeCache()


def clear_caches() -> None:
    """Empties this process's caches of pages drawn (highlighting, templates, formulas): a page is then drawn
    as in a fresh process (tests that time a page's cost start from here)."""
    from autograder.core.sanitize import _converted

    _HIGHLIGHTED.clear()
    _BYTECODE.code.clear()
    _converted.cache_clear()


class FeedbackHTMLExporter(HTMLExporter):
    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = _BYTECODE
        return environment

    def from_notebook_node(self, nb, resources=None, **kw):
        # HTMLExporter.from_notebook_node up to its BeautifulSoup pass (nbconvert 7): the filters it registers.
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        self.register_filter("highlight_code",
                             self.filters.get("highlight_code", CachedHighlight2HTML(pygments_lexer=lexer, parent=self)))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata,
                                                                       parent=self, resources=resources))
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return _IMG_WITHOUT_ALT.sub(f'<img alt="{NO_ALT}"', html), resources
