"""A term's operations: collecting submissions from an LMS, grading a class (:mod:`.grade`), nbgrader's
gradebook, due dates and late penalties, the feedback pages, and the grades exported to an LMS."""
