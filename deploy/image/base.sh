#!/usr/bin/env bash
# A local base image for the grading image, for machines that reach no registry of images: Debian bookworm
# with Python 3.11 from Debian's own packages, built by mmdebstrap from the machine's Debian mirror and
# imported into podman. Usage: deploy/image/base.sh [TAG]   (default: localhost/genlab-base:bookworm)
#   MIRROR: the Debian mirror (default: http://deb.debian.org/debian, as this machine's apt uses)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tag="${1:-localhost/genlab-base:bookworm}"
mirror="${MIRROR:-http://deb.debian.org/debian}"
command -v mmdebstrap >/dev/null 2>&1 || { echo "mmdebstrap is not installed: apt-get install -y mmdebstrap" >&2; exit 127; }
start=$(date +%s)
# minbase: apt, dpkg and Essential only; then Python (python3-venv: the Dockerfile makes a venv, as PEP 668
# keeps pip out of Debian's own Python) and the certificates pip and apt need. Valid-Until off: the mirror may
# be a snapshot (snapshot.debian.org), whose Release files have expired; kept in the image for its apt-get.
mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  bookworm - "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
  | "$here/podman.sh" import --change 'CMD ["python3"]' --change 'ENV LANG=C.UTF-8' - "$tag"
echo "base image $tag built in $(( $(date +%s) - start )) s"
