#!/usr/bin/env bash
# install-deps.sh MODE...: installs the distribution packages fogline needs, by purpose.
#   build    compiler, CMake and the -dev packages `cmake --build` needs
#   runtime  only what a built `fogline serve` loads at run time: its shared libraries, the
#            libwebsockets libuv plugin (dlopened, so ldd does not list it; without it the
#            server cannot create its context) and curl for container health checks
#   test     what the test suites run besides the build: sanitizer runtimes, valgrind,
#            redis-server, nginx, the PyTorch reference, Chromium, Node.js + npm (Debian 12 only)
#   image    what docker/build-test.sh needs to build and run the images without a Docker
#            daemon: podman and runc (crun, podman's default, refuses hybrid cgroup hosts),
#            debootstrap for the base image, python3-yaml to read docker-compose.yml
# Installs only the packages that are missing (no apt-get at all when none is), with sudo when
# not root. Debian 12 (bookworm) is what CI and the CPU image use; Ubuntu 24.04 (noble) is the
# base of the CUDA image, whose runtime library packages have other names.
# Used by tests/setup.sh (build test image) and docker/Dockerfile.* (build; runtime).
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: $0 build|runtime|test|image ..." >&2
  exit 2
fi
# shellcheck source=/dev/null
codename=$( . /etc/os-release && echo "${VERSION_CODENAME:-unknown}")
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

PKGS_BUILD="build-essential cmake pkg-config
  libwebsockets-dev libwebsockets-evlib-uv libuv1-dev libhiredis-dev libjansson-dev
  libopenblas-dev libopenblas0-pthread libpcre2-dev libutf8proc-dev"
case "$codename" in
  bookworm) PKGS_RUNTIME="libwebsockets17 libwebsockets-evlib-uv libuv1 libhiredis0.14 libjansson4
              libopenblas0-pthread libpcre2-8-0 libutf8proc2 curl" ;;
  noble) PKGS_RUNTIME="libwebsockets19t64 libwebsockets-evlib-uv libuv1t64 libhiredis1.1.0 libjansson4
           libopenblas0-pthread libpcre2-8-0 libutf8proc3 curl" ;;
  *) PKGS_RUNTIME="" ;;
esac
PKGS_IMAGE="podman runc debootstrap python3-yaml"
PKGS_TEST="clang libclang-rt-14-dev valgrind redis-server nginx python3-torch python3-numpy chromium tmux"

want=""
node=0
for mode in "$@"; do
  case "$mode" in
    build) want="$want $PKGS_BUILD" ;;
    runtime)
      if [ -z "$PKGS_RUNTIME" ]; then
        echo "$0: no runtime package list for '$codename' (Debian 12 bookworm or Ubuntu 24.04 noble)" >&2
        exit 2
      fi
      want="$want $PKGS_RUNTIME" ;;
    test) want="$want $PKGS_TEST"; node=1 ;;
    image) want="$want $PKGS_IMAGE" ;;
    *) echo "$0: unknown mode '$mode' (build, runtime, test, image)" >&2; exit 2 ;;
  esac
done

missing=""
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
# Node.js: any node >= 18 with npm will do (a machine may carry a vendor build whose nodejs
# package bundles npm and conflicts with Debian's npm package); install Debian's only if absent.
if [ "$node" = 1 ] && { ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; }; then
  missing="$missing nodejs npm"
fi
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -q --no-install-recommends $missing
fi
