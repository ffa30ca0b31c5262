"""The types and rules every room shares: a test's :class:`~autograder.core.results.Result`, the
:class:`~autograder.core.limits.Limits` of a run (from ``autograder/course.toml``), the labs found under
``solutions/`` (:mod:`~autograder.core.labs`), and student text made inert (:mod:`~autograder.core.sanitize`).
Imports nothing else of the grader."""
