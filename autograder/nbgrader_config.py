"""nbgrader's configuration for this course, for instructors who also use nbgrader's own tools.

`genlab release` and `genlab grade` set the same values programmatically; this file makes
`nbgrader generate_assignment`, `nbgrader db ...` and formgrader agree with them when run from the
repository root with `--config autograder/nbgrader_config.py`.

Do not use `nbgrader autograde` on student work: it runs hidden tests inside the student's kernel, where the
student's code can change the verdict (docs/trust-model.md, "How verdicts are kept out of the student's reach").
"""
c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = "genlab"
c.CourseDirectory.source_directory = "solutions"       # solutions/<lab>/<lab>.ipynb: the single source
c.CourseDirectory.release_directory = "labs"           # labs/<lab>/<lab>.ipynb: what students get
c.CourseDirectory.submitted_directory = "submitted"    # submitted/<student>/<lab>/<lab>.ipynb
c.CourseDirectory.db_url = "sqlite:///out/gradebook.db"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
