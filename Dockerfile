# The grading image: runs `genlab grade` on student notebooks, CPU only.
#
#   make image                                          # podman, this Dockerfile (deploy/image/build.sh)
#   docker build -t genlab-grader .
#   docker run --rm genlab-grader                       # prints `genlab grade` usage
#   docker run --rm -v "$PWD/submissions:/submissions:ro" -v "$PWD/out:/out" genlab-grader \
#       genlab grade /submissions --out /out
#
# The base is a build argument: the official Python image by default; any Debian-like image with Python 3.11
# or newer and its venv module will do, such as the one deploy/image/base.sh makes with mmdebstrap on a machine
# that reaches no registry (`--build-arg BASE=localhost/genlab-base:bookworm`; `make image` chooses itself).
#
# The autograder runs each submission inside bubblewrap (bwrap), which needs user namespaces. Docker's and
# podman's default seccomp profiles refuse to create them, and the container holds no CAP_SYS_ADMIN: there
# `genlab grade` falls back to container mode (autograder/wall/container.py: the kernel runs as an
# unprivileged uid of its own, the grader's files closed to it), says so in its output, and `course.toml`
# can forbid it ([platform] allow_container_mode = false). For bubblewrap inside the container, podman needs
# `--security-opt seccomp=unconfined --cap-add SYS_ADMIN --security-opt unmask=ALL` (without the last, bubblewrap
# cannot mount /proc over podman's masked paths; measured with podman 4.3.1 and runc).
#
# CUDA variant: torch is pinned in requirements/ci.txt to the CPU wheel, the
# same one CI tests. For a CUDA image pass a wheel index, e.g.
#   docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 -t genlab-grader:cuda .
# and run it with `--gpus all` (needs the NVIDIA container toolkit on the host).
# The torch *version* stays the one pinned in requirements/ci.txt.
ARG BASE=docker.io/library/python:3.11-slim
FROM ${BASE}

# Empty = the CPU wheel exactly as pinned in requirements/ci.txt.
ARG TORCH_INDEX_URL=""

# pip's sources and the certificates it trusts, where the default index is out of reach (deploy/image/build.sh
# passes the machine's own and mounts their folders into the build); unset, pip uses PyPI.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_CERT

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLBACKEND=Agg

# bubblewrap: the submission sandbox; make: `make test`/`make grade`; git: nbgrader and version info;
# chromium (Debian's): the tests open feedback pages in it (no browser download at test time); passwd: useradd
# (a minimal Debian base lacks it); procps: ps and pgrep, for an instructor looking inside.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap make git chromium passwd procps \
    && rm -rf /var/lib/apt/lists/*
# The unprivileged user student kernels run as outside the sandbox (autograder/wall/sandbox.py): the grader runs
# as root here, and drops to this user before entering bubblewrap. No home, no shell, no other group.
RUN useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin genlab-kernel

WORKDIR /opt/genlab
# Every Python package in a venv of its own, on both kinds of base: Debian's own Python refuses pip installs
# into the system (PEP 668). The kernel user reads it (mode 755), as kernels start from it.
RUN python3 -m venv /opt/venv

# Dependencies first, in their own layer: editing a notebook or a .py file then
# does not re-download torch on the next build.
COPY requirements/ci.txt requirements/ci.txt
# With TORCH_INDEX_URL set: first the torch version pinned in ci.txt, from the
# CUDA index; then the other pins. torch goes first so that a package depending
# on torch finds it installed and does not fetch the CPU wheel as well.
RUN if [ -z "$TORCH_INDEX_URL" ]; then \
        pip install -r requirements/ci.txt; \
    else \
        torch_version="$(sed -n 's/^torch==\([0-9][0-9.]*\).*/\1/p' requirements/ci.txt)" \
        && test -n "$torch_version" \
        && pip install "torch==${torch_version}" --index-url "$TORCH_INDEX_URL" \
        && grep -v '^torch==' requirements/ci.txt > /tmp/ci-without-torch.txt \
        && pip install -r /tmp/ci-without-torch.txt; \
    fi

# The repository itself. Keep a .dockerignore excluding .venv/, build outputs and
# student data, or they are copied into the image too.
COPY . .
# --no-deps: every dependency is already installed, exactly as CI installs them.
# The course stays readable by every user: Apptainer (deploy/slurm) runs the image as the submitting user. Where
# bubblewrap cannot grade (container mode) `genlab grade` closes it to kernels at run time; a platform's entry
# point run in this image closes only its own tree, so close /opt/genlab first there (deploy/image/check.py).
RUN pip install -e . --no-deps

CMD ["genlab", "grade", "--help"]
