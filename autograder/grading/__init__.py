"""Grading one submission: assembling the graded notebook from the student's cells and the hidden tests,
running it behind the wall (:mod:`.pipeline`), recording how wrong answers are wrong (:mod:`.behaviour`),
finding the submissions in a folder and caching results by their inputs."""
