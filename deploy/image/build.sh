#!/usr/bin/env bash
# `make image`: builds the grading image (the repository's Dockerfile) with podman.
#   IMAGE       the tag (default: localhost/genlab-grader)
#   IMAGE_BASE  the Dockerfile's BASE: "auto" (default: the official Python image if a registry gives it, else
#               the local one), "official", "local" (deploy/image/base.sh, built here if missing), or any image
# pip's sources: the machine's own (pip-sources.sh) are passed to the build, and the local folders they name
# mounted into it read-only, so a machine whose packages lie on disk builds the same image.
# Prints the build's time and the image's size.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
podman="$here/podman.sh"
tag="${IMAGE:-localhost/genlab-grader}"
official=docker.io/library/python:3.11-slim
local_base=localhost/genlab-base:bookworm
base="${IMAGE_BASE:-auto}"

local_base() {
  if "$podman" image exists "$local_base"; then echo "base: $local_base (already built; podman rmi it to rebuild)" >&2
  else "$here/base.sh" "$local_base" >&2; fi
  echo "$local_base"
}
case "$base" in
  auto)
    if "$podman" image exists "$official" || timeout 120 "$podman" pull -q "$official" >/dev/null 2>&1; then
      base="$official"
    else
      echo "base: no registry gave $official; building a local base with mmdebstrap instead" >&2
      base="$(local_base)"
    fi ;;
  official) base="$official" ;;
  local) base="$(local_base)" ;;
esac

args=(--build-arg "BASE=$base")
# shellcheck source=pip-sources.sh
. "$here/pip-sources.sh"
for var in "${PIP_VARS[@]}"; do args+=(--build-arg "$var"); done
start=$(date +%s)
"$podman" build --network=host "${args[@]}" "${PIP_VOLUMES[@]}" -t "$tag" -f "$repo/Dockerfile" "$repo"
seconds=$(( $(date +%s) - start ))
size=$("$podman" image inspect --format '{{.Size}}' "$tag")
echo "image $tag (base $base) built in $seconds s; $(( size / 1000000 )) MB"
