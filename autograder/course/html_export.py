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
"""
from __future__ import annotations

import re

from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

NO_ALT = "No description has been provided for this image"  # nbconvert's own words for it
_IMG_WITHOUT_ALT = re.compile(r"<img(?![^>]*\salt=)", re.IGNORECASE)


class FeedbackHTMLExporter(HTMLExporter):
    def from_notebook_node(self, nb, resources=None, **kw):
        # HTMLExporter.from_notebook_node up to its BeautifulSoup pass (nbconvert 7): the filters it registers.
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        self.register_filter("highlight_code",
                             self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata,
                                                                       parent=self, resources=resources))
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return _IMG_WITHOUT_ALT.sub(f'<img alt="{NO_ALT}"', html), resources
