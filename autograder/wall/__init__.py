"""The wall around student code: the bubblewrap sandbox and its cgroups, the kernel session that runs a
notebook in it, the request channel to that kernel, the calls the grader makes into it (:mod:`.remote`), and
the static scan of a notebook's source. Everything that touches the student's process lives here."""
