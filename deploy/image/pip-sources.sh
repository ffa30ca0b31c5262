# Sourced by build.sh and setup-check.sh: pip's sources on this machine (pip config, PIP_* variables), for a
# container to use. Sets PIP_VARS (NAME=VALUE, for --build-arg or -e) and PIP_VOLUMES (podman --volume
# arguments: the local folders they name, find-links and file:// indexes, and the certificates pip trusts here,
# a proxy's own authority say, all read-only).
PIP_VARS=()
PIP_VOLUMES=()
_python="$(command -v python3 || command -v python)"
for _key in index-url extra-index-url find-links; do
  _var="PIP_$(echo "$_key" | tr a-z- A-Z_)"
  _value="${!_var:-$("$_python" -m pip config get "global.$_key" 2>/dev/null || true)}"
  [ -n "$_value" ] || continue
  PIP_VARS+=("$_var=$_value")
  for _item in $_value; do
    _path="${_item#file://}"
    case "$_path" in /*) ;; *) continue ;; esac
    # an index's root too: file:///x/simple links to ../../files
    [ "$(basename "$_path")" = simple ] && _path="$(dirname "$_path")"
    [ -d "$_path" ] && PIP_VOLUMES+=(--volume "$_path:$_path:ro")
  done
done
_cert="${PIP_CERT:-$("$_python" -m pip config get global.cert 2>/dev/null || true)}"
if [ -n "$_cert" ] && [ -f "$_cert" ]; then
  PIP_VOLUMES+=(--volume "$_cert:/run/genlab-pip-ca.crt:ro")
  PIP_VARS+=(PIP_CERT=/run/genlab-pip-ca.crt)
fi
