"""Misconception clusters: students who made the same mistake nobody catalogued, grouped by behaviour.

For each function, the submissions that lost marks on its tests and that no catalogued bug explains are given
a fingerprint:

- the function's tests they did not pass;
- the relations of their recorded outputs to the reference's on the same inputs (``results.json``'s
  ``behaviour``, written by :mod:`autograder.grading.behaviour`: ``scaled by 2``, ``not averaged over dim -1``...), each
  also without its number (``scaled by``), so that one mistake whose constant depends on the input (a factor
  of D, the latent size) still shares features across students.

Clustering is deliberately simple, and explainable to an instructor: fingerprints that are *equal* form a
group (same failed tests, same relations); then groups whose feature sets overlap by a Jaccard index of at
least ``MERGE_JACCARD`` are merged (single linkage), which reunites one mistake split by a test that sits on
a tolerance's edge or by a constant rounded differently. Both steps are on the distinct fingerprints, not on
pairs of students: a class of N students with K distinct fingerprints costs O(N + K^2), and K stays small
because a misconception is, by definition, shared.

What it cannot separate: two different mistakes with the same relations on every recorded call and the same
failed tests (dropping the 1/2 and adding the KL twice are both "scaled by 2"), nor mistakes whose outputs
relate to the reference's by none of the listed relations ("other" groups them by failed tests alone), nor
random outputs (a call without its noise argument has no fixed reference output, and is left out).

Left out: students whose failure a catalogued bug names (the bug table counts them), tampered notebooks (void
verdicts), tests stopped by a time or memory limit (listed under statuses), and a function's failures that a
failing dependency explains (``negative_elbo`` calls the student's own ``gaussian_kl``: its cluster is under
``gaussian_kl``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

MERGE_JACCARD = 0.75
COUNTED = ("failed", "error")   # statuses that are a student's behaviour (not a limit, not tampering)


@dataclass
class Cluster:
    function: str
    index: int                                   # 1, 2...: by size, largest first
    students: list[str]
    tests: list[str]                             # the function's tests every member failed
    relations: list[str]                         # the relations every member shows
    representative: str                          # the member closest to all others (the medoid)
    fingerprints: dict[str, frozenset] = field(default_factory=dict, repr=False)


def features(failed: list[str], relations: list[str]) -> frozenset[str]:
    """A fingerprint as a set: ``fails T`` per failed test, each relation, and each relation's kind."""
    kinds = {re.sub(r"\s*-?\d[\d.e+-]*$", "", r) for r in relations}
    return frozenset([f"fails {t}" for t in failed] + list(relations) + [f"kind {k}" for k in kinds])


def jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def candidates(entries: dict[str, dict], function: str, tests_of: dict[str, str],
               depends: dict[str, list[str]]) -> dict[str, tuple[list[str], list[str]]]:
    """student -> (failed tests of ``function``, relations) for the students this function's clusters are about.

    ``entries``: student -> their ``results.json`` entry for the lab; ``tests_of``: test -> its function."""
    found = {}
    for student, entry in entries.items():
        tests = entry["tests"]
        if any(t["status"] == "tampered" for t in tests):
            continue
        own = [t for t in tests if tests_of.get(t["test"]) == function]
        lost = [t for t in own if t["status"] != "passed"]
        if not lost or any(t["status"] not in COUNTED for t in lost) or any(t["diagnosis"] for t in lost):
            continue
        upstream = set(depends.get(function, []))
        if any(t["status"] != "passed" for t in tests if tests_of.get(t["test"]) in upstream):
            continue  # explained by a function it calls, which is clustered under its own name
        relations = sorted((entry.get("behaviour", {}).get(function) or {}).get("relations", {}))
        found[student] = ([t["test"] for t in lost], [r for r in relations if r != "equal"])
    return found


def cluster(function: str, found: dict[str, tuple[list[str], list[str]]]) -> list[Cluster]:
    """Exact groups of equal fingerprints, then single-linkage merging of groups at ``MERGE_JACCARD``."""
    groups: dict[frozenset, list[str]] = {}
    for student in sorted(found):
        groups.setdefault(features(*found[student]), []).append(student)
    keys = list(groups)
    parent = list(range(len(keys)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            if jaccard(keys[i], keys[j]) >= MERGE_JACCARD:
                parent[root(j)] = root(i)
    merged: dict[int, list[frozenset]] = {}
    for i, key in enumerate(keys):
        merged.setdefault(root(i), []).append(key)
    clusters = []
    for members in merged.values():
        students = sorted(s for key in members for s in groups[key])
        prints = {s: features(*found[s]) for s in students}
        # the medoid: the member whose fingerprint is, on average, closest to the others' (students are sorted,
        # and max keeps the first of equals: ties go to the first name)
        representative = max(students, key=lambda s: sum(jaccard(prints[s], prints[o]) for o in students))
        common_tests = set.intersection(*(set(found[s][0]) for s in students))
        common_relations = set.intersection(*(set(found[s][1]) for s in students))
        clusters.append(Cluster(function, 0, students, sorted(common_tests), sorted(common_relations),
                                representative, prints))
    clusters.sort(key=lambda c: (-len(c.students), c.students[0]))
    for i, c in enumerate(clusters, 1):
        c.index = i
    return clusters


def for_lab(entries: dict[str, dict], tests_of: dict[str, str], depends: dict[str, list[str]]) -> dict[str, list[Cluster]]:
    """function -> its clusters, for every function of the lab (in the order of its tests)."""
    functions = list(dict.fromkeys(tests_of.values()))
    return {f: cluster(f, candidates(entries, f, tests_of, depends)) for f in functions}
