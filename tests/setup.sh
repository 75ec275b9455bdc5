#!/usr/bin/env bash
# Installs everything fogline needs to build and test on Debian 12: the build and runtime
# packages, the test tools (redis-server, nginx, the PyTorch reference, Chromium, Node.js),
# podman and debootstrap for the image test (docker/build-test.sh) and the npm test tools
# (tests/node). Used by .ci/run and the README's commands; the package lists
# live in docker/install-deps.sh, which the Dockerfiles call too, so that all of them install
# the same things.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/../docker/install-deps.sh" build test image
if [ "${FL_SETUP_NO_NPM:-0}" != 1 ]; then
  (cd "$here/node" && npm ci --no-audit --no-fund --loglevel=error)
fi
