"""Where courses actually grade: Gradescope's autograder and PrairieLearn's external grader (issue 45)."""
