"""What is derived from ``solutions/``: the student notebooks (nbgrader's ``generate_assignment``), the
outputs nbval compares, the student bundle and its leak check, and the sample submissions."""
