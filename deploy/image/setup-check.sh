#!/usr/bin/env bash
# Runs the setup.sh of a Gradescope autograder zip (`genlab release --gradescope`) in a fresh root file system of
# the distribution Gradescope's images are built on, then its run_autograder on one notebook: what Gradescope does
# when it builds the image and grades. Not part of `make image-check` (minutes: setup.sh installs Python's
# packages). Usage: deploy/image/setup-check.sh ZIP NOTEBOOK [jammy|bookworm]   (default: jammy, Ubuntu 22.04)
# The root file system is made by mmdebstrap from the distribution's own mirror (Ubuntu's: archive.ubuntu.com,
# its Release files not checked against Ubuntu's keys, which Debian does not ship) and imported into podman.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
zip="$(realpath "$1")"; notebook="$(realpath "$2")"; dist="${3:-jammy}"
tag="localhost/genlab-setup-check:$dist"
case "$dist" in
  jammy) mirrors=("deb [trusted=yes] http://archive.ubuntu.com/ubuntu jammy main universe"
                  "deb [trusted=yes] http://archive.ubuntu.com/ubuntu jammy-updates main universe"
                  "deb [trusted=yes] http://security.ubuntu.com/ubuntu jammy-security main universe") ;;
  bookworm) mirrors=("deb http://deb.debian.org/debian bookworm main" "deb http://deb.debian.org/debian bookworm-updates main") ;;
  *) echo "jammy or bookworm, not $dist" >&2; exit 2 ;;
esac
if ! "$here/podman.sh" image exists "$tag"; then
  start=$(date +%s)
  # apt named: minbase holds it on Debian, not on Ubuntu (where its priority is "important")
  mmdebstrap --variant=minbase --include=apt,ca-certificates --aptopt='Acquire::Check-Valid-Until "false"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/*' "$dist" - "${mirrors[@]}" \
    | "$here/podman.sh" import - "$tag"
  echo "root file system $tag: $(( $(date +%s) - start )) s"
fi
. "$here/pip-sources.sh"
env_args=()
for var in "${PIP_VARS[@]}"; do env_args+=(-e "$var"); done
work="$(mktemp -d)"; chmod 755 "$work"
mkdir -p "$work/autograder/source" "$work/autograder/submission" "$work/autograder/results"
(cd "$work/autograder/source" && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(".")' "$zip")
chmod 755 "$work/autograder/source/setup.sh" "$work/autograder/source/run_autograder"
cp "$work/autograder/source/run_autograder" "$work/autograder/run_autograder"
cp "$notebook" "$work/autograder/submission/"
start=$(date +%s)
# As Gradescope: setup.sh in /autograder/source, as root, with the network; then run_autograder, in the same
# container (the image Gradescope builds), with the default seccomp profile (no namespaces: container mode).
"$here/podman.sh" run --rm --network=host "${env_args[@]}" "${PIP_VOLUMES[@]}" -v "$work/autograder:/autograder" \
  -w /autograder/source "$tag" bash -c 'set -e; bash ./setup.sh; echo "setup.sh: done in $SECONDS s";
    /opt/genlab-venv/bin/python -V; cd /autograder && ./run_autograder'
echo "setup.sh and run_autograder: $(( $(date +%s) - start )) s"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("score", d["score"], "of", sum(t["max_score"] for t in d.get("tests", [])), "|", d["output"][:200])' \
  "$work/autograder/results/results.json"
rm -rf "$work"
