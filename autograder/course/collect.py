"""``genlab collect``: an LMS's "download all submissions" zip (or its unzipped folder) into nbgrader's tree.

The result is what ``genlab grade`` reads: ``SUBMISSIONS/<student>/<lab>/<lab>.ipynb`` with nbgrader's
``timestamp.txt`` next to it (read by ``CourseDirectory.get_existing_timestamp``, parsed by
``nbgrader.utils.parse_utc``). The names the LMSs give the files, as their own source writes them:

- **Canvas** (instructure/canvas-lms, ``lib/content_zipper.rb``, ``get_filename`` and
  ``add_upload_submission``): ``<name>[_LATE]_<user id>_<attachment id>_<original file name>``, all files
  loose at the top of the zip. ``<name>`` is the student's sortable name ("Last, First") lower-cased, with
  every character that is not a letter, digit or underscore removed (``müllerjosé``); ``LATE`` is added when
  Canvas counts the submission late; an anonymized assignment writes ``anon_<anonymous id>`` for the user id.
  The third field is the file's attachment id, not a submission id.
- **Moodle** (moodle/moodle, ``mod/assign/classes/downloader.php``, ``get_student_prefix`` and
  ``load_submissionplugin_filelist``): ``<Full Name>_<participant id>_assignsubmission_file/<file>`` (one
  folder per student, the default since Moodle 3.1), or ``<Full Name>_<participant id>_assignsubmission_file_<file>``
  when "download submissions in folders" is off. Underscores in the name become spaces; the id is the
  assignment's participant id (``get_uniqueid_for_user``), not the user id: it is the number in "Participant
  NNN" of Moodle's grading worksheet. Files of other submission plugins (``assignsubmission_onlinetext``) are
  reported and kept, never graded.

**When a file was handed in.** Neither zip carries the submission time in its names. ``collect`` writes the
zip entry's modification time (a folder's file: its mtime), read as UTC. Canvas's zipper writes each entry
with rubyzip's ``get_output_stream`` and no time, so there that is the time the zip was built, not the
submission time: the only lateness Canvas's names carry is ``_LATE_``. So pass ``--times FILE`` (a CSV of
``id,submitted_at``: the LMS id or the genlab student id, and an ISO 8601 time with its offset, e.g. from
Canvas's submissions API ``submitted_at`` or Moodle's grading worksheet "Last modified (submission)"), which
overrides the zip's times; an instructor may also edit a ``timestamp.txt`` by hand before grading.

**Students** are named through a roster (``roster.csv``: ``lms_id,name,email,student_id``, optionally
``sis_user_id,sis_login_id,section`` for the exports): by LMS id first, then by name. Without a roster the
folder is the LMS id. A file that matches no one is kept under ``SUBMISSIONS/.unmatched/`` and reported,
never dropped; when one student has several notebooks for the lab, the latest counts and the others are kept
under ``SUBMISSIONS/.superseded/<student>/<lab>/``. Every entry and what became of it is listed in
``SUBMISSIONS/.collect-<lab>.csv``. Folders starting with a dot are not students to ``genlab grade``.

**Zip entries are untrusted.** No entry's name is ever used as a path: each notebook is written to a path
built from the student id and the lab. Entries that are links, not regular files, with ``..`` or an absolute
path in their name, or larger than ``Limits.max_notebook_mib`` (course.toml, the cap the grader applies to
a handed-in notebook, :func:`autograder.grading.submissions.refusal`) are refused and reported; sizes are checked
on the bytes actually read, not only on the size the zip's header claims.
"""
from __future__ import annotations

import csv
import re
import stat
import unicodedata
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"   # nbgrader's own (nbgrader.exchange: timestamp_format)
MAX_ENTRIES = 20000                       # a zip of more entries is refused whole

# Canvas: <name>[_LATE]_<user id>_<attachment id>_<original name>; <name> never holds _<digits>_ (Canvas
# removes such runs, sanitize_user_name), so the first _<id>_<digits>_ ends it.
CANVAS = re.compile(r"^(?P<name>.*?)(?:_(?P<late>LATE))?_(?P<id>\d+|anon_[A-Za-z0-9]+)_(?P<att>\d+)_(?P<orig>.+)$")
# Moodle: <Full Name>_<participant id>_assignsubmission_<type>, a folder, or a prefix of the file's name.
MOODLE = re.compile(r"^(?P<name>.+)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)(?:_(?P<orig>.+))?$")


@dataclass
class Student:
    student_id: str
    lms_id: str = ""
    name: str = ""
    email: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""


def squash(name: str) -> str:
    """A name as Canvas writes it in a file name: lower case, letters and digits only (accents kept)."""
    return "".join(ch for ch in unicodedata.normalize("NFC", name).casefold() if ch.isalnum())


class Roster:
    """``roster.csv``: one row per student (``lms_id,name,email,student_id`` and optional Canvas columns)."""

    def __init__(self, students: list[Student]):
        self.students = students
        self.by_lms = {s.lms_id: s for s in students if s.lms_id}
        self.by_id = {s.student_id: s for s in students}

    @classmethod
    def read(cls, path: Path | None) -> "Roster":
        if path is None:
            return cls([])
        with Path(path).open(newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
        missing = {"lms_id", "name", "email", "student_id"} - set(rows[0] if rows else {})
        if missing:
            raise SystemExit(f"{path}: the roster needs the columns lms_id,name,email,student_id; "
                             f"missing {sorted(missing)}")
        return cls([Student(**{k: (r.get(k) or "").strip() for k in Student.__dataclass_fields__}) for r in rows])

    def match(self, lms_id: str, name: str) -> Student | None:
        """By LMS id, else by name (in either order: Canvas writes "Last, First", Moodle "First Last")."""
        if not self.students:
            return Student(student_id=safe_id(lms_id), lms_id=lms_id, name=name)
        if lms_id in self.by_lms:
            return self.by_lms[lms_id]
        want = squash(name)
        named = [s for s in self.students
                 if want and want in (squash(s.name), squash(" ".join(reversed(s.name.replace(",", " ").split()))))]
        return named[0] if len(named) == 1 else None

    def lookup(self, key: str) -> Student | None:
        return self.by_lms.get(key) or self.by_id.get(key)


def safe_id(text: str) -> str:
    """A folder name made of the id's safe characters only (nbgrader student ids are folder names)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text).strip(".") or "unnamed"


@dataclass
class Entry:
    """One file of the download, whatever became of it."""
    name: str                      # the entry's name in the zip (or path under the folder)
    lms: str = ""                  # canvas or moodle
    lms_id: str = ""
    lms_name: str = ""
    late_flag: bool = False        # Canvas's _LATE_
    order: int = 0                 # Canvas attachment id, or position: breaks ties between equal times
    when: datetime | None = None
    when_from: str = ""
    student: str = ""
    outcome: str = ""              # collected, superseded, unmatched, refused, not a notebook
    why: str = ""
    data: bytes = field(default=b"", repr=False)


def parse_name(name: str) -> dict | None:
    """LMS, id, name and original file name from a Canvas or Moodle entry name, else None."""
    parts = PurePosixPath(name).parts
    for i, part in enumerate(parts[:-1]):  # Moodle's folder per student (possibly under the zip's own folder)
        m = MOODLE.match(part)
        if m and not m["orig"]:
            return {"lms": "moodle", "id": m["id"], "name": m["name"], "plugin": m["plugin"],
                    "orig": "/".join(parts[i + 1:]), "late": False, "order": 0}
    base = parts[-1]
    m = MOODLE.match(base)
    if m and m["orig"]:
        return {"lms": "moodle", "id": m["id"], "name": m["name"], "plugin": m["plugin"], "orig": m["orig"],
                "late": False, "order": 0}
    m = CANVAS.match(base)
    if m:
        return {"lms": "canvas", "id": m["id"], "name": m["name"], "plugin": "file", "orig": m["orig"],
                "late": bool(m["late"]), "order": int(m["att"])}
    return None


def _unsafe_name(name: str) -> str:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or re.match(r"^[A-Za-z]:", name):
        return "an absolute path"
    if ".." in path.parts:
        return "a '..' in its path"
    return ""


def read_zip(source: Path, max_bytes: int) -> list[Entry]:
    entries = []
    with zipfile.ZipFile(source) as zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        if len(infos) > MAX_ENTRIES:
            raise SystemExit(f"{source}: {len(infos)} entries, over the {MAX_ENTRIES} a submissions zip may hold")
        for k, info in enumerate(infos):
            e = Entry(info.filename, order=k)
            mode = info.external_attr >> 16
            unsafe = _unsafe_name(info.filename)
            if unsafe:
                e.outcome, e.why = "refused", f"its name has {unsafe}: never written anywhere"
            elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # no type bits (DOS, Windows tools): a plain file
                e.outcome, e.why = "refused", "a link or special file, not a regular file"
            elif info.file_size > max_bytes:
                e.outcome, e.why = "refused", _too_big(info.file_size, max_bytes)
            else:
                with zf.open(info) as f:
                    e.data = f.read(max_bytes + 1)   # the header's size may lie: cap the bytes read
                if len(e.data) > max_bytes:
                    e.outcome, e.why, e.data = "refused", _too_big(len(e.data), max_bytes), b""
            e.when, e.when_from = datetime(*info.date_time, tzinfo=timezone.utc), "zip entry time (UTC)"
            entries.append(e)
    return entries


def read_folder(source: Path, max_bytes: int) -> list[Entry]:
    entries = []
    for k, path in enumerate(sorted(p for p in source.rglob("*") if not p.is_dir() or p.is_symlink())):
        e = Entry(path.relative_to(source).as_posix(), order=k)
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            e.outcome, e.why = "refused", "a link or special file, not a regular file"
        elif info.st_size > max_bytes:
            e.outcome, e.why = "refused", _too_big(info.st_size, max_bytes)
        else:
            with path.open("rb") as f:
                e.data = f.read(max_bytes + 1)
            if len(e.data) > max_bytes:
                e.outcome, e.why, e.data = "refused", _too_big(len(e.data), max_bytes), b""
        e.when, e.when_from = datetime.fromtimestamp(info.st_mtime, timezone.utc), "file mtime"
        entries.append(e)
    return entries


def _too_big(size: int, max_bytes: int) -> str:
    return f"{size / 2**20:.1f} MiB, over the {max_bytes / 2**20:.0f} MiB a notebook may be (course.toml max_notebook_mib)"


def read_times(path: Path | None, roster: Roster) -> dict[str, datetime]:
    """``--times``: {LMS id or student id: submission time} from a CSV of ``id,submitted_at``."""
    if path is None:
        return {}
    times = {}
    with Path(path).open(newline="", encoding="utf-8-sig") as f:
        for row in csv.DictReader(f):
            when = datetime.fromisoformat(row["submitted_at"].strip().replace("Z", "+00:00"))
            if when.tzinfo is None:
                raise SystemExit(f"{path}: {row['submitted_at']!r} has no UTC offset; write it as "
                                 "2026-10-01T23:59:00+02:00 (or Z for UTC)")
            times[row["id"].strip()] = when.astimezone(timezone.utc)
    return times


def _notebook_ok(data: bytes) -> str:
    """Why these bytes are not a notebook nbgrader can read, or ""."""
    import json

    try:
        nb = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return f"not a notebook (not JSON: {str(exc)[:80]})"
    return "" if isinstance(nb, dict) and isinstance(nb.get("cells"), list) else "not a notebook (no cells)"


def collect(source: Path, lab: str, into: Path, roster: Roster, max_bytes: int,
            times: dict[str, datetime] | None = None) -> list[Entry]:
    """Writes ``into/<student>/<lab>/<lab>.ipynb`` and ``timestamp.txt`` for each student's latest notebook;
    returns every entry with its outcome (also written to ``into/.collect-<lab>.csv``)."""
    source, into, times = Path(source), Path(into), times or {}
    entries = read_folder(source, max_bytes) if source.is_dir() else read_zip(source, max_bytes)
    candidates: dict[str, list[Entry]] = {}
    for e in entries:
        parsed = parse_name(e.name)
        if parsed:
            e.lms, e.lms_id, e.lms_name, e.late_flag = parsed["lms"], parsed["id"], parsed["name"], parsed["late"]
            e.order = parsed["order"] or e.order
        if e.outcome:  # refused while reading
            continue
        if not e.name.lower().endswith(".ipynb") or (parsed and parsed["plugin"] != "file"):
            e.outcome, e.why = "not a notebook", "kept under .unmatched/ for the instructor; not graded"
            _keep(into / ".unmatched", e)
            continue
        if parsed is None:
            e.outcome, e.why = "unmatched", "its name is neither Canvas's nor Moodle's naming"
            _keep(into / ".unmatched", e)
            continue
        student = roster.match(e.lms_id, e.lms_name)
        if student is None:
            e.outcome, e.why = "unmatched", f"no one in the roster has LMS id {e.lms_id} or the name {e.lms_name!r}"
            _keep(into / ".unmatched", e)
            continue
        bad = _notebook_ok(e.data)
        if bad:
            e.student, e.outcome, e.why = student.student_id, "refused", bad
            _keep(into / ".unmatched", e)
            continue
        e.student = student.student_id
        given = times.get(e.lms_id) or times.get(student.student_id)
        if given is not None:
            e.when, e.when_from = given, "--times"
        candidates.setdefault(e.student, []).append(e)
    for student, mine in candidates.items():
        mine.sort(key=lambda e: (e.when, e.order))
        latest = mine[-1]
        folder = into / student / lab
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{lab}.ipynb").write_bytes(latest.data)
        (folder / "timestamp.txt").write_text(latest.when.strftime(TIME_FORMAT) + "\n")
        latest.outcome = "collected"
        for k, e in enumerate(mine[:-1]):
            e.outcome, e.why = "superseded", f"an earlier notebook: {latest.name} is later and counts"
            _keep(into / ".superseded" / student / lab, e, prefix=f"{k + 1}_{e.when:%Y%m%dT%H%M%SZ}_")
    _write_manifest(into / f".collect-{lab}.csv", entries)
    return entries


def _keep(folder: Path, e: Entry, prefix: str = "") -> None:
    """A copy of an entry's bytes under a name made safe (its name is the LMS's, never a path of ours)."""
    if not e.data:
        return
    folder.mkdir(parents=True, exist_ok=True)
    name = prefix + (safe_id(PurePosixPath(e.name.replace("\\", "/")).name) or "file")
    path, n = folder / name, 1
    while path.exists():
        n += 1
        path = folder / f"{n}_{name}"
    path.write_bytes(e.data)


def _write_manifest(path: Path, entries: list[Entry]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["entry", "lms", "lms_id", "lms_name", "student", "outcome", "submitted_at", "time_from",
                    "lms_marked_late", "why"])
        for e in entries:
            w.writerow([e.name, e.lms, e.lms_id, e.lms_name, e.student, e.outcome,
                        e.when.isoformat() if e.when else "", e.when_from, "yes" if e.late_flag else "", e.why])


def report(entries: list[Entry], lab: str, into: Path) -> str:
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.outcome] = counts.get(e.outcome, 0) + 1
    lines = [f"{lab}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + f" -> {into}"]
    for e in entries:
        if e.outcome in ("unmatched", "refused", "not a notebook"):
            lines.append(f"  {e.outcome}: {e.name}: {e.why}")
    late_zip = [e for e in entries if e.outcome == "collected" and e.late_flag and e.when_from != "--times"]
    if late_zip:
        lines.append(f"  {len(late_zip)} collected notebook(s) Canvas marked LATE carry only the zip's time: pass "
                     "--times with Canvas's submitted_at for the late penalty to be right")
    lines.append(f"  every entry: {into / f'.collect-{lab}.csv'}")
    return "\n".join(lines)

