#!/usr/bin/env bash
# Runs a command with GENLAB_TEST_PG_URL set, and leaves no server behind:
#   - a server the caller passed in (GENLAB_TEST_PG_URL already set) is used as it is and left alone;
#   - otherwise .ci/postgres.sh starts a throwaway one, which is stopped and its data folder removed when the
#     command ends, however it ends (a failure, Ctrl-C). Without PostgreSQL the command still runs, and the
#     PostgreSQL tests skip (or fail, under GENLAB_REQUIRE_PG=1, as in CI).
# The command's exit status is this script's.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -n "${GENLAB_TEST_PG_URL:-}" ]; then
    exec "$@"
fi
if url="$(bash "$here/postgres.sh")" && [ -n "$url" ]; then
    export GENLAB_TEST_PG_URL="$url"
    # Quietly: pytest's closing line ("N passed ...") stays the last line of the run.
    trap 'bash "$here/postgres.sh" stop >/dev/null 2>&1; rm -rf "${GENLAB_PG_DIR:-/tmp/genlab-pg}"' EXIT
    trap 'exit 130' INT TERM
fi
"$@"
