#!/usr/bin/env bash
# Installs everything fogline needs to build and test on Debian 12: the build and runtime
# packages, the PyTorch reference, and the npm test tools (tests/node). Used by .ci/run, the
# README's commands and the Dockerfiles, so that all of them install the same things.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
PKGS_BUILD="build-essential cmake pkg-config clang libclang-rt-14-dev valgrind
  libwebsockets-dev libwebsockets-evlib-uv libuv1-dev libhiredis-dev libjansson-dev
  libopenblas-dev libopenblas0-pthread libpcre2-dev libutf8proc-dev"
PKGS_TEST="redis-server python3-torch python3-numpy chromium"
missing=""
for p in $PKGS_BUILD $PKGS_TEST; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
# Node.js: any node >= 18 with npm will do (a machine may carry a vendor build whose nodejs
# package bundles npm and conflicts with Debian's npm package); install Debian's only if absent.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing="$missing nodejs npm"
fi
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -q --no-install-recommends $missing
fi
if [ "${FL_SETUP_NO_NPM:-0}" != 1 ]; then
  (cd "$here/node" && npm ci --no-audit --no-fund --loglevel=error)
fi
