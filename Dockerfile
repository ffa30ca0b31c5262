# The grading image: runs `genlab grade` on student notebooks, CPU only.
#
#   docker build -t genlab-grader .
#   docker run --rm genlab-grader                       # prints `genlab grade` usage
#   docker run --rm -v "$PWD/submissions:/submissions" genlab-grader genlab grade ...
#
# The autograder runs each submission inside bubblewrap (bwrap), which needs
# user namespaces. Docker's default seccomp profile blocks creating them, so if
# the sandbox fails to start add `--security-opt seccomp=unconfined` (or a
# profile that allows clone/unshare with CLONE_NEWUSER) to `docker run`.
#
# CUDA variant: torch is pinned in requirements/ci.txt to the CPU wheel, the
# same one CI tests. For a CUDA image pass a wheel index, e.g.
#   docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 -t genlab-grader:cuda .
# and run it with `--gpus all` (needs the NVIDIA container toolkit on the host).
# The torch *version* stays the one pinned in requirements/ci.txt.
FROM python:3.11-slim

# Empty = the CPU wheel exactly as pinned in requirements/ci.txt.
ARG TORCH_INDEX_URL=""

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLBACKEND=Agg

# bubblewrap: the submission sandbox; make: `make test`/`make grade`; git: nbgrader and version info;
# chromium (Debian's): the tests open feedback pages in it (no browser download at test time).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap make git chromium \
    && rm -rf /var/lib/apt/lists/*
# The unprivileged user student kernels run as outside the sandbox (autograder/wall/sandbox.py): the grader runs
# as root here, and drops to this user before entering bubblewrap. No home, no shell, no other group.
RUN useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin genlab-kernel

WORKDIR /opt/genlab

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
RUN pip install -e . --no-deps

CMD ["genlab", "grade", "--help"]
