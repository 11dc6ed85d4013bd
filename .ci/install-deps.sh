#!/usr/bin/env bash
# install-deps.sh: the Debian packages loom builds and tests with. Idempotent: installs only what
# is missing, so running it again costs a second. Uses sudo when not root.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libcjson-dev libopenblas-dev
      openmpi-bin libopenmpi-dev libhdf5-dev libhdf5-openmpi-dev hdf5-tools)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
