"""The grading image's wiring, checked cheaply (issue 45): the build itself is `make image` and `make image-check`,
run outside `make test` (minutes; docs/instructor-guide.md, "The grading image")."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "deploy" / "image"


def test_the_dockerfiles_base_is_a_build_argument_defaulting_to_the_official_python_image():
    text = (ROOT / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert froms == ["${BASE}"]
    assert re.search(r"^ARG BASE=docker\.io/library/python:3\.11-slim$", text, re.M)
    assert text.index("ARG BASE=") < text.index("FROM ${BASE}")
    # the venv and the kernel user both bases need
    assert "python3 -m venv /opt/venv" in text and "useradd --system" in text


def test_the_build_context_leaves_out_the_venv_and_build_outputs():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "out"} <= set(ignored)


def test_make_image_and_image_check_exist_outside_make_test():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^image:.*\n\tbash deploy/image/build\.sh$", makefile, re.M)
    assert re.search(r"^image-check: venv.*\n\t.*deploy/image/check\.py$", makefile, re.M)
    test_recipe = re.search(r"^test: venv.*?(?=^\S)", makefile, re.M | re.S).group(0)
    assert "image" not in test_recipe
    dry = subprocess.run(["make", "-n", "image"], cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0 and "deploy/image/build.sh" in dry.stdout


def test_the_scripts_parse_and_podman_runs_with_runc_and_no_default_ulimits():
    for script in ("build.sh", "base.sh", "podman.sh"):
        assert subprocess.run(["bash", "-n", str(IMAGE / script)]).returncode == 0, script
    conf = (IMAGE / "containers.conf").read_text()
    assert re.search(r"^default_ulimits = \[\]$", conf, re.M) and re.search(r'^runtime = "runc"$', conf, re.M)
    base = (IMAGE / "base.sh").read_text()
    assert "mmdebstrap" in base and "python3-venv" in base and "import" in base
    build = (IMAGE / "build.sh").read_text()
    assert "--build-arg \"BASE=$base\"" in build and "base.sh" in build
