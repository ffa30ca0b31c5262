#!/usr/bin/env bash
# podman as `make image` and `make image-check` run it: with deploy/image/containers.conf (runc, no default
# ulimits), and the machine's own configuration otherwise untouched. Usage: deploy/image/podman.sh ARGS...
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command -v podman >/dev/null 2>&1 || {
  echo "podman is not installed: apt-get install -y podman runc (and mmdebstrap, for a local base image)" >&2
  exit 127
}
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
exec podman "$@"
