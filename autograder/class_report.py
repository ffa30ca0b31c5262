"""The instructor's view of a graded class: one static HTML page with figures, and the same numbers as a CSV.

``write_class_report(out)`` reads what grading left behind and writes ``out/class-report.html`` and
``out/class-report.csv``:

- the scores come from the gradebook (nbgrader's database, SQLite or PostgreSQL), so a class graded as N
  shards into one gradebook gets one report, whichever machine writes it;
- what the gradebook cannot hold (each test's status, the catalogued bugs diagnosed, the time a notebook took)
  comes from ``results.json``, one per machine that graded (pass every shard's file to cover the class).

It answers what no per-student feedback can: which misconceptions are common ("31% of the class flipped the
KL's sign"). Every bug of each lab's catalogue is listed, with 0% where nobody made it, so an empty row is a
measurement, not a forgotten bug.

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
from html import escape
from pathlib import Path

HTML_NAME, CSV_NAME = "class-report.html", "class-report.csv"
CSV_COLUMNS = ["lab", "kind", "name", "function", "count", "of", "percent", "students"]
PASSED, FAILED = "passed", "failed"


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


def _lab_report(lab, scores, details):
    """(summary row, CSV rows, HTML section) for one lab."""
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
    pass_rows, pass_rates, more = _pass_rates(lab, tests, students, scores, status)
    rows_csv += more
    bug_rows, bug_counts, trusted, more = _bug_frequencies(lab, status, known)
    rows_csv += more
    odd_rows, more = _odd_statuses(lab, status)
    rows_csv += more
    seconds = {s: float(details[(s, lab)].get("seconds", 0.0)) for s in known}
    rows_csv += [[lab, "seconds", s, "", f"{seconds[s]:g}", "", "", s] for s in known]
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
    reports = [_lab_report(lab, scores, details) for lab in sorted({lab for _, lab in scores})]
    html_path, csv_path = out / HTML_NAME, out / CSV_NAME
    html_path.write_text(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
        # No scripts, no requests: the page shows only what is in it.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
        "style-src 'unsafe-inline'\">"
        "<title>genlab class report</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:1em auto}table{border-collapse:collapse;margin:.5em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:left}img{margin:4px;max-width:100%}"
        "</style></head><body><h1>Class report</h1>"
        + _table(["lab", "handed in", "not handed in", "max score", "mean score", "with statuses"],
                 [summary for summary, _, _ in reports], "summary")
        + "".join(section for _, _, section in reports) + "</body></html>")
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for _, rows, _ in reports:
            writer.writerows(rows)
    return html_path, csv_path
