#!/usr/bin/env bash
# System packages and accounts the grader needs. Best effort: installs when run as root with apt-get
# available, otherwise says what to do. Idempotent: safe to run on every `make test`.
#   - bubblewrap: the sandbox every student kernel runs in;
#   - the user genlab-kernel: the unprivileged account kernels run as *outside* the sandbox, so that a kernel
#     started by a root grader is not root anywhere (no login, no home, no groups);
#   - chromium (Debian's package): the tests open feedback pages in it to prove no student script runs.
set -u
KERNEL_USER="${GENLAB_KERNEL_USER:-genlab-kernel}"
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 && [ "${#missing[@]}" -gt 0 ]; then
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
fi
if [ "$(id -u)" = "0" ] && ! id -u "$KERNEL_USER" >/dev/null 2>&1; then
  # A system account: no home, no shell, its own group and no other.
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$KERNEL_USER" \
    || echo "NOTE: could not create the user $KERNEL_USER; genlab grade (as root) will refuse to grade without --unsafe" >&2
fi
command -v bwrap >/dev/null 2>&1 || echo "NOTE: bubblewrap is not installed (apt-get install bubblewrap); genlab grade will refuse to grade without --unsafe" >&2
command -v chromium >/dev/null 2>&1 || echo "NOTE: chromium is not installed (apt-get install chromium); the feedback-page browser tests will be skipped" >&2
exit 0
