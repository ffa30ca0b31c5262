"""The quality of a lab's tests: mutants of each reference solution, the audit that grades them, and the
sentinels (the mutants one assertion alone catches) that ``make test`` checks."""
