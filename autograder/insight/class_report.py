"""The instructor's view of a graded class: one static HTML page with figures, and the same numbers as a CSV.

``write_class_report(out)`` reads what grading left behind and writes ``out/class-report.html`` and
``out/class-report.csv``:

- the scores come from the gradebook (nbgrader's database, SQLite or PostgreSQL), so a class graded as N
  shards into one gradebook gets one report, whichever machine writes it;
- what the gradebook cannot hold (each test's status, the catalogued bugs diagnosed, the time a notebook took)
  comes from ``results.json``, one per machine that graded (pass every shard's file to cover the class).

It answers what no per-student feedback can: which misconceptions are common ("31% of the class flipped the
KL's sign"). Every bug of each lab's catalogue is listed, with 0% where nobody made it, so an empty row is a
measurement, not a forgotten bug. Beyond the catalogue, per lab:

- item analysis per test (:mod:`autograder.insight.items`): pass rate, point-biserial discrimination, and flags for a
  test nearly everyone fails or one with negative discrimination;
- misconception clusters (:mod:`autograder.insight.clusters`): students who failed a function's tests in the same way
  and whom no catalogued bug names, with a representative student's solution cell
  (``genlab catalog suggest`` turns one into a catalogue entry);
- similar solutions (:mod:`autograder.insight.similarity`): pairs of students sharing long spans of their own code.

The solution cells shown come from ``results.json`` (``solutions``; for older runs, the autograded
notebooks beside it). This page is the instructor's alone: no part of it goes into any student's
feedback.

The page is sanitized by construction: every string from a submission (student names, messages) is
HTML-escaped, figures are embedded PNGs (``data:`` URLs), and a Content-Security-Policy forbids scripts and
any network request, so it opens safely and offline.
"""
from __future__ import annotations

import base64
import csv
import io
import json
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from html import escape
from pathlib import Path

from autograder.insight import clusters as clustering
from autograder.insight import items as item_analysis
from autograder.insight import similarity

HTML_NAME, CSV_NAME = "class-report.html", "class-report.csv"
# statistic: an item's discrimination, a similar pair's smaller share; detail: flags, a cluster's relations
CSV_COLUMNS = ["lab", "kind", "name", "function", "count", "of", "percent", "students", "statistic", "detail"]
PASSED, FAILED = "passed", "failed"
ROOT = Path(__file__).resolve().parents[2]


def _gradebook_scores(db_url: str) -> dict[tuple[str, str], dict[str, tuple[float | None, float]]]:
    """{(student, lab): {test: (score, max_score)}} for every submission in the gradebook."""
    from nbgrader.api import Assignment, Grade, GradeCell, SubmittedAssignment, SubmittedNotebook
    from sqlalchemy import create_engine, select
    from sqlalchemy.pool import NullPool

    engine = create_engine(db_url, poolclass=NullPool)  # read only: no schema creation, as Gradebook would do
    query = (select(SubmittedAssignment.student_id, Assignment.name, GradeCell.name, GradeCell.max_score,
                    Grade.auto_score, Grade.manual_score)
             .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
             .join(SubmittedNotebook, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
             .join(Grade, Grade.notebook_id == SubmittedNotebook.id)
             .join(GradeCell, Grade.cell_id == GradeCell.id))
    scores: dict[tuple[str, str], dict[str, tuple[float | None, float]]] = defaultdict(dict)
    try:
        with engine.connect() as conn:
            for student, lab, test, max_score, auto, manual in conn.execute(query):
                score = manual if manual is not None else auto  # nbgrader's rule: a manual grade wins
                # None: not graded yet (a manually graded cell nobody has marked)
                scores[(student, lab)][test] = (None if score is None else float(score), float(max_score or 0))
    finally:
        engine.dispose()
    return dict(scores)


def _results(files) -> dict[tuple[str, str], dict]:
    """{(student, lab): that entry of results.json}; a later file wins (a regraded shard)."""
    found = {}
    for path in files:
        for entry in json.loads(Path(path).read_text()):
            found[(entry["student"], entry["lab"])] = entry
    return found


def _sources(files, out: Path, details=None) -> dict[tuple[str, str], dict[str, str]]:
    """{(student, lab): {grade_id: source}} of the solution cells: from results.json (``solutions``), else from
    the autograded notebooks beside each results.json (a shard's own folder) and in ``out`` (older runs)."""
    import nbformat

    from genlab.testing.notebook import grade_id, is_solution

    found = {key: entry["solutions"] for key, entry in (details or {}).items() if entry.get("solutions")}
    for folder in dict.fromkeys([Path(f).parent for f in files] + [Path(out)]):
        for path in sorted((folder / "autograded").glob("*/*/*.ipynb")):
            student, lab = path.parent.parent.name, path.parent.name
            if (student, lab) in found:
                continue
            try:
                nb = nbformat.read(str(path), as_version=4)
            except Exception:  # noqa: BLE001 - an unreadable copy: no code shown for it
                continue
            found[(student, lab)] = {grade_id(c): c.source for c in nb.cells if is_solution(c)}
    return found


@dataclass(frozen=True)
class LabInfo:
    """What the report needs of a lab's own folder: each test's function, what calls what, the boilerplate."""
    tests_of: dict
    depends: dict
    boilerplate: list


@lru_cache(maxsize=None)
def lab_info(lab: str) -> LabInfo:
    import nbformat

    from autograder.core.labs import LabFolder
    from autograder.release.sample_submissions import reference_sources
    from genlab.testing.notebook import LabNotebook

    folder = LabFolder(ROOT, lab)
    if not folder.source.is_file():
        return LabInfo({}, {}, [])
    tests_of = {t: spec["function"] for t, spec in LabNotebook.read(folder.source).tests.items()}
    release = nbformat.read(str(folder.release), as_version=4) if folder.release.is_file() else None
    given = [c.source for c in release.cells if c.cell_type == "code"] if release else []  # what code can copy
    return LabInfo(tests_of, folder.depends, given + list(reference_sources(folder).values()))


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(draw, width: float, height: float) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))  # not pyplot's: nothing global, no display backend needed
    draw(fig.add_subplot())
    fig.tight_layout()
    return _png(fig)


def _table(header: list[str], rows: list[list], css: str = "") -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _pct(count: int, of: int) -> float:
    return round(100.0 * count / of, 1) if of else 0.0


def _pass_rates(lab, tests, students, scores, status):
    """Each test's pass rate, over the students it was graded for: the status where results.json has one;
    otherwise (another machine's shard, a manually graded cell) full marks in the gradebook."""
    pass_rows, pass_rates, csv_rows = [], [], []
    for t in tests:
        graded, passed = [], []
        for s in students:
            score, points = scores[(s, lab)].get(t, (None, 0.0))
            if (s, t) in status:
                graded.append(s)
                passed += [s] if status[(s, t)]["status"] == PASSED else []
            elif score is not None and points > 0:
                graded.append(s)
                passed += [s] if score >= points else []
        pass_rates.append(_pct(len(passed), len(graded)))
        pass_rows.append([t, f"{len(passed)}/{len(graded)}" if graded else "not graded yet",
                          f"{pass_rates[-1]:g}%" if graded else "-"])
        csv_rows.append([lab, "test_passed", t, "", len(passed), len(graded), pass_rates[-1], ""])
    return pass_rows, pass_rates, csv_rows


def _bug_frequencies(lab, status, known):
    """How often each catalogued bug was diagnosed: students (not tests) with the bug, as % of the class.
    A tampered notebook's verdicts are void, so its diagnoses are no evidence of a misconception: those
    students are left out of these counts (they are listed under statuses)."""
    from genlab.catalog import bugs_for

    tampered = {s for (s, _t), entry in status.items() if entry["status"] == "tampered"}
    trusted = [s for s in known if s not in tampered]
    diagnosed: dict[str, set[str]] = defaultdict(set)
    for (s, _t), entry in status.items():
        for bug_id in entry.get("diagnosis", []) if s in trusted else []:
            diagnosed[bug_id].add(s)
    catalogue = bugs_for(lab)
    by_function = sorted(catalogue, key=lambda b: (b.function, -len(diagnosed[b.id]), b.id))
    entries = [(b.function, b.id, b.title) for b in by_function]
    renamed = sorted(set(diagnosed) - {b.id for b in catalogue})  # a catalogue renamed since grading
    entries += [("?", bug_id, "(not in the current catalogue)") for bug_id in renamed]
    bug_rows, csv_rows = [], []
    for function, bug_id, title in entries:
        who = sorted(diagnosed[bug_id])
        share = _pct(len(who), len(trusted))
        bug_rows.append([function, bug_id, title, f"{len(who)}/{len(trusted)}", f"{share:g}%", ", ".join(who)])
        csv_rows.append([lab, "bug", bug_id, "" if function == "?" else function, len(who), len(trusted), share,
                         ";".join(who)])
    bug_counts = [(f"{b.function}: {b.id}", _pct(len(diagnosed[b.id]), len(trusted))) for b in catalogue]
    return bug_rows, bug_counts, trusted, csv_rows


def _odd_statuses(lab, status):
    """Statuses other than passed/failed, with the students concerned: these need an instructor's look."""
    odd: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for (s, t), entry in status.items():
        if entry["status"] not in (PASSED, FAILED):
            odd[entry["status"]][s].append(t)
    odd_rows, csv_rows = [], []
    reported = len({s for s, _ in status})  # everyone with statuses, absent students included
    for st in sorted(odd):
        for s in sorted(odd[st]):
            messages = [status[(s, t)].get("message", "") for t in odd[st][s]]
            first = next((m for m in messages if m), "")
            odd_rows.append([st, s, len(odd[st][s]), first.splitlines()[0][:200] if first else ""])
        csv_rows.append([lab, "status", st, "", len(odd[st]), reported, _pct(len(odd[st]), reported),
                         ";".join(sorted(odd[st]))])
    return odd_rows, csv_rows


def _items(lab, tests, students, scores, info):
    """Item analysis per test: rows for the page and the CSV (autograder.insight.items)."""
    found = item_analysis.analyse(tests, students, lambda s, t: (lambda v: None if v[0] is None else v)(
        scores[(s, lab)].get(t, (None, 0.0))))
    rows, csv_rows = [], []
    for it in found:
        r = "" if it.discrimination is None else f"{it.discrimination:.2f}"
        rate = "-" if it.difficulty is None else f"{100 * it.difficulty:.0f}%"
        rows.append([it.test, info.tests_of.get(it.test, ""), f"{it.passed}/{it.graded}", rate,
                     r or "none (no variance)", "; ".join(it.flags)])
        csv_rows.append([lab, "item", it.test, info.tests_of.get(it.test, ""), it.passed, it.graded,
                         "" if it.difficulty is None else round(100 * it.difficulty, 1), "", r, ";".join(it.flags)])
    return rows, csv_rows


def _clusters(lab, details, students, info, sources):
    """Misconception clusters per function (autograder.insight.clusters): HTML and CSV rows."""
    entries = {s: details[(s, lab)] for s in students if (s, lab) in details}
    found = clustering.for_lab(entries, info.tests_of, info.depends)
    html, csv_rows = [], []
    for function, groups in found.items():
        if not groups:
            continue
        total = sum(len(c.students) for c in groups)
        html.append(f"<h4>{escape(function)}</h4><p>{total} students lost marks on it with no catalogued bug "
                    f"named, in {len(groups)} groups of the same behaviour.</p>")
        rows = []
        for c in groups:
            rows.append([c.index, len(c.students), ", ".join(c.students), ", ".join(c.tests),
                         ", ".join(c.relations) or "none of the listed relations", c.representative])
            csv_rows.append([lab, "cluster", f"{function}#{c.index}", function, len(c.students), total,
                             _pct(len(c.students), total), ";".join(c.students), c.representative,
                             ";".join(c.relations)])
        html.append(_table(["cluster", "students", "who", "tests failed", "outputs vs the reference's",
                            "representative"], rows, "clusters"))
        for c in groups:
            if len(c.students) < 2:
                continue
            code = sources.get((c.representative, lab), {}).get(function)
            html.append(f"<p>cluster {c.index} ({len(c.students)} students), {escape(c.representative)}'s "
                        f"solution cell (<code>genlab catalog suggest RUN_DIR {escape(function)} {c.index}</code> "
                        "writes it as a catalogue entry):</p>"
                        + (f'<pre class="code">{escape(code)}</pre>' if code is not None
                           else "<p>(no autograded notebook found for this student)</p>"))
    return "".join(html) or "<p>none: every failure is named by a catalogued bug, or nobody failed</p>", csv_rows


def _similarity(lab, students, info, sources):
    """Pairs of similar solutions (autograder.insight.similarity): HTML and CSV rows."""
    codes = {s: list(sources[(s, lab)].values()) for s in students if (s, lab) in sources}
    pairs = similarity.similar_pairs(codes, info.boilerplate)
    csv_rows = [[lab, "similar_pair", f"{p.a} | {p.b}", "", p.shared_chars, "", round(100 * min(p.similarity), 1),
                 f"{p.a};{p.b}", f"{min(p.similarity):.2f}", f"{p.similarity[0]:.2f};{p.similarity[1]:.2f}"]
                for p in pairs]
    head = (f"<p>{len(codes)} students' solution cells compared (winnowing, names ignored; the release's text "
            f"and the reference solution left out as boilerplate); pairs whose shared code is at least "
            f"{similarity.THRESHOLD:.0%} of each one's own code. This is evidence to read, not a finding: code "
            "is shared for honest reasons too.</p>")
    if not pairs:
        return head + "<p>no pair above the threshold</p>", csv_rows
    body = "".join(
        f"<h4>{escape(p.a)} and {escape(p.b)}: {p.similarity[0]:.0%} / {p.similarity[1]:.0%} shared "
        f"({p.shared_chars} characters)</h4><div class=\"pair\"><pre class=\"code\">{p.highlighted[0]}</pre>"
        f"<pre class=\"code\">{p.highlighted[1]}</pre></div>" for p in pairs)
    return head + body, csv_rows


def _figures(lab, totals, max_total, students, tests, pass_rates, bug_counts, seconds) -> list[str]:
    figures = [
        _figure(lambda ax: (ax.hist(list(totals.values()), bins=min(20, max(5, len(students))),
                                    range=(0, max_total or 1), color="#4c72b0"),
                            ax.set_xlabel(f"score (of {max_total:g})"), ax.set_ylabel("students"),
                            ax.set_title(f"{lab}: score distribution")), 5, 3),
        _figure(lambda ax: (ax.barh(tests[::-1], pass_rates[::-1], color="#55a868"), ax.set_xlim(0, 100),
                            ax.set_xlabel("% of the class passing"), ax.set_title(f"{lab}: pass rate per test"),
                            ax.tick_params(axis="y", labelsize=7)), 6, 0.25 * len(tests) + 1),
    ]
    if bug_counts:
        names, shares = [n for n, _ in bug_counts][::-1], [v for _, v in bug_counts][::-1]
        figures.append(_figure(lambda ax: (ax.barh(names, shares, color="#c44e52"), ax.set_xlim(0, 100),
                                           ax.set_xlabel("% of the class diagnosed"),
                                           ax.set_title(f"{lab}: catalogued bugs"),
                                           ax.tick_params(axis="y", labelsize=7)), 6, 0.25 * len(bug_counts) + 1))
    if seconds:
        figures.append(_figure(lambda ax: (ax.hist(list(seconds.values()), bins=min(20, max(5, len(seconds))),
                                                   color="#8172b2"),
                                           ax.set_xlabel("seconds to grade one notebook"),
                                           ax.set_ylabel("notebooks"), ax.set_title(f"{lab}: grading time")), 5, 3))
    return figures


def _lab_report(lab, scores, details, sources):
    """(summary row, CSV rows, HTML section) for one lab."""
    info = lab_info(lab)
    enrolled = sorted(s for s, lab_ in scores if lab_ == lab)
    # A student whose every test is "missing" handed nothing in: listed under statuses, left out of the
    # class's figures (a zero for an absent notebook says nothing about the lab).
    absent = {s for s in enrolled if (s, lab) in details
              and all(t["status"] == "missing" for t in details[(s, lab)]["tests"])}
    students = [s for s in enrolled if s not in absent]
    known = [s for s in students if (s, lab) in details]  # submissions this report has statuses for
    status = {(s, t["test"]): t for s in enrolled if (s, lab) in details for t in details[(s, lab)]["tests"]}
    tests = list(dict.fromkeys(t for s in enrolled for t in scores[(s, lab)]))
    max_total = max((sum(m for _, m in scores[(s, lab)].values()) for s in enrolled), default=0.0)
    totals = {s: sum(v or 0.0 for v, _ in scores[(s, lab)].values()) for s in students}
    summary = [lab, len(students), len(absent), f"{max_total:g}",
               f"{sum(totals.values()) / len(students):.1f}" if students else "-", len(known)]
    rows_csv = [[lab, "score", s, "", f"{totals[s]:g}", f"{max_total:g}", _pct(totals[s], max_total), s]
                for s in students]
    item_rows, more = _items(lab, tests, students, scores, info)
    rows_csv += more
    pass_rows, pass_rates, more = _pass_rates(lab, tests, students, scores, status)
    rows_csv += more
    bug_rows, bug_counts, trusted, more = _bug_frequencies(lab, status, known)
    rows_csv += more
    odd_rows, more = _odd_statuses(lab, status)
    rows_csv += more
    seconds = {s: float(details[(s, lab)].get("seconds", 0.0)) for s in known}
    rows_csv += [[lab, "seconds", s, "", f"{seconds[s]:g}", "", "", s] for s in known]
    cluster_html, more = _clusters(lab, details, students, info, sources)
    rows_csv += more
    similar_html, more = _similarity(lab, students, info, sources)
    rows_csv += more
    figures = _figures(lab, totals, max_total, students, tests, pass_rates, bug_counts, seconds)
    slowest = sorted(seconds.items(), key=lambda kv: -kv[1])[:10]
    section = (
        f'<section id="{escape(lab)}"><h2>{escape(lab)}</h2>'
        f"<p>{len(students)} notebooks handed in ({len(absent)} students handed none in); statuses and "
        f"diagnoses known for {len(known)} of them (the others: another machine's results.json).</p>"
        + "".join(f'<img alt="{escape(lab)} figure" src="{src}">' for src in figures)
        + "<h3>Scores</h3>" + _table(["student", "score", "of"],
                                     [[s, f"{totals[s]:g}", f"{max_total:g}"] for s in students], "scores")
        + "<h3>Pass rate per test</h3>" + _table(["test", "passed", "rate"], pass_rows, "tests")
        + "<h3>Catalogued bugs diagnosed, per function</h3>"
        + f"<p>% of the {len(trusted)} students with statuses whose notebook was not tampered with.</p>"
        + _table(["function", "bug", "what", "students", "% of class", "who"], bug_rows, "bugs")
        + f'<div class="report-part" id="{escape(lab)}-part-items"><h3>Item analysis per test</h3>'
        + "<p>Pass rate, and discrimination: the point-biserial correlation of passing the test with the rest of "
          "the student's total (none where either has no variance). A flag marks a test to read again: "
          f"nearly everyone fails (at most {item_analysis.FAIL_RATE:.0%} pass), or negative discrimination "
          f"(r below {item_analysis.NEGATIVE_R:g}); none with fewer than {item_analysis.MIN_STUDENTS} students.</p>"
        + _table(["test", "function", "passed", "pass rate", "discrimination", "flags"], item_rows, "items")
        + "</div>"
        + f'<div class="report-part" id="{escape(lab)}-part-clusters">'
        + '<h3 id="' + escape(lab) + '-clusters">Uncatalogued misconceptions: students grouped by behaviour</h3>'
        + "<p>For each function, the students who lost marks on it and whom no catalogued bug names, grouped by "
          "the tests they failed and by how their outputs relate to the reference's on the same inputs.</p>"
        + cluster_html + "</div>"
        + f'<div class="report-part" id="{escape(lab)}-part-similarity">'
        + '<h3 id="' + escape(lab) + '-similarity">Similar solutions (instructor only)</h3>' + similar_html + "</div>"
        + "<h3>Statuses other than passed/failed</h3>"
        + (_table(["status", "student", "tests", "first reason"], odd_rows, "statuses") if odd_rows
           else "<p>none</p>")
        + "<h3>Grading time per notebook</h3>"
        + (f"<p>median {sorted(seconds.values())[len(seconds) // 2]:.1f} s, "
           f"total {sum(seconds.values()):.0f} s over {len(seconds)} notebooks; slowest:</p>"
           + _table(["student", "seconds"], [[s, f"{v:.1f}"] for s, v in slowest], "seconds")
           if seconds else "<p>no times recorded</p>")
        + "</section>")
    return summary, rows_csv, section


def write_class_report(out: Path, db_url: str | None = None, results_files=None) -> tuple[Path, Path]:
    """Writes ``class-report.html`` and ``class-report.csv`` into ``out`` and returns their paths.

    ``db_url``: the gradebook (default: ``out/gradebook.db``, what ``genlab grade`` writes without ``--db``).
    ``results_files``: the ``results.json`` of every machine that graded (default: ``out/results.json``).
    """
    out = Path(out)
    db_url = db_url or f"sqlite:///{out / 'gradebook.db'}"
    if results_files is None:
        results_files = [out / "results.json"] if (out / "results.json").is_file() else []
    scores = _gradebook_scores(db_url)
    details = _results(results_files)
    html, rows = render(scores, details, _sources(results_files, out, details))
    html_path, csv_path = out / HTML_NAME, out / CSV_NAME
    html_path.write_text(html)
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(rows)
    return html_path, csv_path


def render(scores, details, sources) -> tuple[str, list[list]]:
    """The page and the CSV rows, from the gradebook's scores ({(student, lab): {test: (score, max)}}), the
    results.json entries ({(student, lab): entry}) and the solution cells ({(student, lab): {grade_id: source}})."""
    reports = [_lab_report(lab, scores, details, sources) for lab in sorted({lab for _, lab in scores})]
    return (
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
        # No scripts, no requests: the page shows only what is in it.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
        "style-src 'unsafe-inline'\">"
        "<title>genlab class report</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:1em auto}table{border-collapse:collapse;margin:.5em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:left}img{margin:4px;max-width:100%}"
        "pre.code{background:#f6f6f6;padding:6px;font-size:12px;overflow-x:auto;flex:1}mark{background:#ffd54f}"
        ".pair{display:flex;gap:8px}"
        "</style></head><body><h1>Class report</h1>"
        + _table(["lab", "handed in", "not handed in", "max score", "mean score", "with statuses"],
                 [summary for summary, _, _ in reports], "summary")
        + "".join(section for _, _, section in reports) + "</body></html>",
        [row + [""] * (len(CSV_COLUMNS) - len(row)) for _, rows, _ in reports for row in rows])
