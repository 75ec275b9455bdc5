#!/usr/bin/env bash
# tests/gpu/prepare.sh: run HERE (the Debian development machine, which reaches Debian's
# package registry) before the device call. The GPU machine reaches no registry and may lack
# jansson, pcre2 and utf8proc, which the engine needs; this unpacks their Debian -dev
# packages (headers and static libraries, ~3 MB) into .gpu-deps/root, adds .gpu-deps to
# .git/info/exclude, and the device call carries it:
#
#   bash tests/gpu/prepare.sh
#   run(command="bash tests/gpu/run.sh", carry=[".gpu-deps"], timeout_s=560)
#
# Static libraries: the test programs then need nothing from it at run time, and Debian 12's
# objects link on the GPU machine's newer glibc (Ubuntu 24.04).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dst="$root/.gpu-deps"
pkgs=(libjansson-dev libpcre2-dev libutf8proc-dev)
rm -rf "$dst"
mkdir -p "$dst/debs" "$dst/root"
if ! (cd "$dst/debs" && apt-get download "${pkgs[@]}" >/dev/null 2>&1); then
    echo "prepare: apt-get download failed; running apt-get update once" >&2
    apt-get update >/dev/null
    (cd "$dst/debs" && apt-get download "${pkgs[@]}")
fi
for d in "$dst"/debs/*.deb; do
    dpkg-deb -x "$d" "$dst/root"
done
rm -rf "$dst/debs" "$dst/root/usr/share"
for f in libjansson.a libpcre2-8.a libutf8proc.a; do
    test -f "$dst/root/usr/lib/x86_64-linux-gnu/$f" || { echo "prepare: $f missing" >&2; exit 1; }
done
exclude=$(cd "$root" && git rev-parse --git-path info/exclude)
case $exclude in /*) ;; *) exclude="$root/$exclude" ;; esac
grep -qxF '/.gpu-deps/' "$exclude" 2>/dev/null || echo '/.gpu-deps/' >>"$exclude"
echo "prepare: $(du -sh "$dst" | cut -f1) in $dst (carry it: carry=[\".gpu-deps\"])"
