"""Pairs of students whose solution cells share long spans of code, for the instructor to look at.

Each student's solution cells of a lab are fingerprinted with winnowing (Schleimer, Wilkerson & Aiken,
SIGMOD 2003, the method MOSS uses), by the ``copydetect`` package: the code is tokenized by Pygments and
every name is replaced by one letter (so renaming variables changes nothing), and hashes of its k-grams of
``NOISE_CHARS`` characters are kept. Shared spans shorter than that are never counted.

Boilerplate, left out of every fingerprint:
- the release's own code: every code cell of ``labs/<lab>/<lab>.ipynb``, the starter code of the solution
  cells (signature, docstring) and the given cells (setup, demonstrations) alike;
- the reference solution. A short function has few correct forms, so students who each found the expected
  answer share it without having shared anything; only what departs from it can be evidence.

A pair is listed when the shared code is at least ``THRESHOLD`` of *each* student's remaining (non-boilerplate)
code, and at least ``MIN_SHARED_CHARS`` long. Only pairs that share at least one fingerprint are compared (an
inverted index from hash to students), so a class of N students costs far less than the N^2/2 comparisons
of a naive loop when most code is the student's own or boilerplate.

This is evidence to read, never an accusation: two students may share code for many honest reasons (a
study group allowed by the course, a common tutorial). It appears only in the instructor's class report,
never in a student's feedback.
"""
from __future__ import annotations

import io
import re
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

NOISE_CHARS = 25        # copydetect's default noise threshold: k-grams of 25 characters after filtering
THRESHOLD = 0.5         # share of each student's own code that the pair shares
MIN_SHARED_CHARS = 40   # and at least this much of it
MAX_POSTING = 200       # a hash held by more students than this is common code, not evidence: not indexed
# Between cells, and around each boilerplate text: punctuation survives the tokenizer's filter, and a run of
# NOISE_CHARS of it means no k-gram spans two cells. Otherwise the k-grams across the boundary of two
# unchanged cells would be nobody's boilerplate, and every pair of correct students would share them.
SEPARATOR = "\n" + ";" * NOISE_CHARS + "\n"
SHOWN_SEPARATOR = re.compile(r"(?:;|</?mark>){%d,}" % NOISE_CHARS)  # shown as a line of dashes
DOCSTRING = re.compile(r"[ \t]*(\"\"\"|\'\'\')[\s\S]*?\1[ \t]*\n?")


def joined(cells) -> str:
    """A student's solution cells (or a boilerplate text) as one text to fingerprint."""
    return SEPARATOR + SEPARATOR.join(cells) + SEPARATOR


@dataclass
class Pair:
    a: str
    b: str
    similarity: tuple[float, float]   # shared share of a's code, of b's code
    shared_chars: int
    highlighted: tuple[str, str]      # each student's code, HTML-escaped, shared spans in <mark>


def _fingerprint(code: str, boilerplate=None):
    from copydetect import CodeFingerprint

    # language named: finding the lexer from a file name costs 4x the tokenizing of a short cell
    return CodeFingerprint("solution.py", NOISE_CHARS, 1, boilerplate=boilerplate, fp=io.StringIO(code),
                           language="python")


def without_docstrings(text: str) -> str:
    """The text with its triple-quoted strings removed: a student who deletes a given docstring joins the
    given signature to the given first line, and that must stay boilerplate too."""
    return DOCSTRING.sub("", text)


def _normal(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def boilerplate_hashes(texts: list[str]):
    """The fingerprints of the release's text and of the reference solution (k-grams at every position), with
    and without their docstrings."""
    import numpy as np

    variants = dict.fromkeys(v for text in texts if text.strip() for v in (text, without_docstrings(text)))
    hashes = [h for variant in variants for h in _fingerprint(joined([variant])).hashes]
    return np.unique(np.array(hashes, dtype=np.int64))


def similar_pairs(codes: dict[str, list[str]], boilerplate: list[str]) -> list[Pair]:
    """The pairs of students (``codes``: student -> their solution cells) over the threshold, most similar first."""
    from copydetect import compare_files
    from copydetect.utils import highlight_overlap

    common = boilerplate_hashes(boilerplate)
    # A cell that is boilerplate whole (the reference's, the starter code left as given) adds no fingerprint:
    # it is left out before the costly step, tokenizing, which is then paid only for students' own cells.
    given = {_normal(t) for t in boilerplate} | {_normal(without_docstrings(t)) for t in boilerplate}
    own = {s: [c for c in cells if _normal(c) not in given] for s, cells in codes.items()}
    prints = {s: _fingerprint(joined(cells), common) for s, cells in own.items() if "".join(cells).strip()}
    index: dict[int, list[str]] = defaultdict(list)
    for s, fp in prints.items():
        for h in fp.hashes:
            index[h].append(s)
    candidates = {tuple(sorted(p)) for holders in index.values() if len(holders) <= MAX_POSTING
                  for p in combinations(holders, 2)}
    pairs = []
    for a, b in sorted(candidates):
        shared, (sim_a, sim_b), (slices_a, slices_b) = compare_files(prints[a], prints[b])
        if shared < MIN_SHARED_CHARS or min(sim_a, sim_b) < THRESHOLD:
            continue
        marked = tuple(highlight_overlap(prints[s].raw_code, sl, "<mark>", "</mark>", escape_html=True)[0]
                       for s, sl in ((a, slices_a), (b, slices_b)))
        marked = tuple(SHOWN_SEPARATOR.sub(lambda m: m.group(0).replace(";", "-"), text).strip("\n-")
                       for text in marked)
        pairs.append(Pair(a, b, (float(sim_a), float(sim_b)), int(shared), marked))
    pairs.sort(key=lambda p: (-min(p.similarity), p.a, p.b))
    return pairs
