#!/usr/bin/env bash
# build-test.sh [WORKDIR]: builds docker/Dockerfile.cpu for real with podman (no Docker daemon)
# and runs the image's server through the test suites that already check the host binary.
#
#  1. The base image: `debian:bookworm-slim` from local storage; when absent, from the tarball
#     cached in WORKDIR; else made with `debootstrap --variant=minbase bookworm` from the Debian
#     mirror apt uses, trimmed as the official slim image is (no docs, man pages, locales,
#     apt lists or .deb cache) and imported. No registry is asked (`--pull=never`).
#  2. `podman build --format docker` (the OCI format drops HEALTHCHECK), tagged
#     localhost/fogline:cpu-test. Checks what the image says of itself: a non-root USER, the
#     HEALTHCHECK, ENTRYPOINT/CMD, STOPSIGNAL; reports its size and the build time.
#  3. Runs containers when this host allows it (crun, then runc, with rlimits no higher than
#     this host's: see docs/deploy.md for why podman's defaults fail here), else chroots into
#     `podman image mount` with the image's ENV, USER, WORKDIR and ENTRYPOINT applied here:
#     - the image as it is (ENTRYPOINT + CMD, port 8080 published on loopback; container only):
#       /health, the HEALTHCHECK itself (`podman healthcheck run`), `podman stop` exits 0;
#     - tests/server/ops.test.mjs's SIGTERM cases (draining) with the image's server;
#     - tests/topology/{proxy,sessions}.test.mjs with both replicas from the image, with the
#       environment docker/docker-compose.yml gives them, Redis and nginx (docker/nginx's
#       template) as in topology.mjs: /health, /ready, the web page, WebSocket chats with
#       drafts through nginx, the openai npm client, a session resumed after SIGKILL of its
#       replica.
# Everything it starts or mounts is removed at exit, on failure too.
#
# Environment: FL_IMAGE_MODE=container|chroot (default: container when it runs here),
# FL_IMAGE_KEEP=1 keeps the built image (and its build cache) for the next run, JOBS (make
# jobs in the build, default: nproc). Needs root, podman, runc, debootstrap, python3-yaml,
# node with tests/node installed, redis-server, nginx (bash docker/install-deps.sh image test).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=$(mkdir -p "${1:-$root/build/image}" && cd "${1:-$root/build/image}" && pwd)
base=docker.io/library/debian:bookworm-slim
image=localhost/fogline:cpu-test
label="fogline-image-test=$$"
t0=$(date +%s)
say() { echo "image: $*"; }
fail() { echo "image: FAIL: $*" >&2; exit 1; }

for tool in podman debootstrap node redis-server; do
  command -v "$tool" >/dev/null || fail "no $tool (bash docker/install-deps.sh image test)"
done
# rootful podman, debootstrap and chroot need root: as tests/setup.sh does, a user who is not
# root goes through sudo (without a password prompt: ctest has no terminal to ask on)
if [ "$(id -u)" != 0 ]; then
  sudo -n true 2>/dev/null ||
    fail "needs root (rootful podman, debootstrap, chroot): run tests/run.sh as root or with passwordless sudo"
  exec sudo -n --preserve-env=FL_BIN,FL_TESTS_DIR,FL_BUILD_DIR,FL_IMAGE_MODE,FL_IMAGE_KEEP,JOBS,PATH \
    bash "$0" "$@"
fi

mnt=""
binds=()
cleanup() {
  set +e
  local ids
  ids=$(podman ps -aq --filter "label=$label")
  # shellcheck disable=SC2086
  [ -z "$ids" ] || podman rm -f -t 0 $ids >/dev/null 2>&1
  for b in "${binds[@]}"; do umount -l "$b" 2>/dev/null; done
  [ -z "$mnt" ] || podman image unmount "$image" >/dev/null 2>&1
  [ "${FL_IMAGE_KEEP:-0}" = 1 ] || podman rmi -f "$image" >/dev/null 2>&1
  rm -rf "$work/rootfs.tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# 1. the base image
if podman image exists "$base"; then
  say "base: $base is in local storage"
elif [ -s "$work/debian-bookworm-slim.tar" ]; then
  say "base: importing the cached $work/debian-bookworm-slim.tar"
  podman import --change 'CMD ["bash"]' "$work/debian-bookworm-slim.tar" "$base" >/dev/null
else
  say "base: debootstrap --variant=minbase bookworm"
  r="$work/rootfs.tmp"
  rm -rf "$r"
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  debootstrap --variant=minbase bookworm "$r" "${mirror:-http://deb.debian.org/debian}" \
    >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap failed"; }
  # what the official slim image does: apt keeps no .debs, dpkg installs no docs or locales,
  # and the security and updates suites are in the sources
  printf '%s\n' 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };' \
    'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };' \
    'Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";' > "$r/etc/apt/apt.conf.d/docker-clean"
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' \
    > "$r/etc/dpkg/dpkg.cfg.d/docker"
  rm -f "$r/etc/apt/sources.list"
  printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm bookworm-updates' \
    'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' '' \
    'Types: deb' 'URIs: http://deb.debian.org/debian-security' 'Suites: bookworm-security' \
    'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
    > "$r/etc/apt/sources.list.d/debian.sources"
  find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/lib/apt/lists/* \
    "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/locale/* "$r"/var/log/*.log "$r"/var/log/apt/*
  tar --numeric-owner -C "$r" -cf "$work/debian-bookworm-slim.tar.tmp" .
  mv "$work/debian-bookworm-slim.tar.tmp" "$work/debian-bookworm-slim.tar"
  rm -rf "$r"
  podman import --change 'CMD ["bash"]' "$work/debian-bookworm-slim.tar" "$base" >/dev/null
fi
t1=$(date +%s)

# 2. the image
say "building docker/Dockerfile.cpu as $image (log: $work/build.log)"
# no intermediate images are kept (--layers=false) unless FL_IMAGE_KEEP=1 asks for a cache
layers=false
[ "${FL_IMAGE_KEEP:-0}" = 1 ] && layers=true
podman build --pull=never --format docker --isolation chroot --network host --layers="$layers" \
  --build-arg JOBS="${JOBS:-$(nproc)}" -f "$root/docker/Dockerfile.cpu" -t "$image" "$root" \
  >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; fail "podman build failed"; }
t2=$(date +%s)
grep -q '^smoke: ok' "$work/build.log" || fail "the build did not run docker/smoke.sh"
# podman's own warnings (e.g. HEALTHCHECK dropped in OCI format) and those of our own steps;
# not dpkg's about man pages that the slim base leaves out
if grep -E '^WARN\[|level=warn|^useradd warning' "$work/build.log" >&2; then
  fail "the build warned (above)"
fi
inspect() { podman image inspect "$image" --format "$1"; }
size=$(inspect '{{.Size}}')
user=$(inspect '{{.Config.User}}')
[ -n "$user" ] && [ "$user" != root ] && [ "$user" != 0 ] || fail "the image runs as root (USER '$user')"
[ "$(inspect '{{json .Config.Healthcheck.Test}}')" != null ] || fail "the image has no HEALTHCHECK (OCI format?)"
[ "$(inspect '{{.Config.StopSignal}}')" = SIGTERM ] || fail "STOPSIGNAL is not SIGTERM"
entry=$(inspect '{{range .Config.Entrypoint}}{{.}} {{end}}')
[ "$(inspect '{{json .Config.Cmd}}')" = '["serve"]' ] || fail "CMD is not [\"serve\"]"
say "image: $(( size / 1000000 )) MB ($size bytes), $(inspect '{{len .RootFS.Layers}}') layers, user $user, entrypoint [$entry]"
say "build: $((t2 - t1)) s (base image: $((t1 - t0)) s)"

# 3. how the image's server runs here
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
pidmax=$(cat /proc/sys/kernel/pid_max)
[ "$nproc" = unlimited ] || [ "$nproc" -gt "$pidmax" ] && nproc=$pidmax
[ "$nofile" = unlimited ] && nofile=1048576
# podman's own defaults (RLIMIT_NOFILE 1048576 and NPROC above this host's hard limits) are
# refused in a sandbox that may not raise a hard limit; these are this host's own
ulimits="--ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc"
mode=${FL_IMAGE_MODE:-}
runopts=""
if [ "$mode" != chroot ]; then
  why=""
  for rt in crun runc; do
    command -v "$rt" >/dev/null || { why="$why; $rt: not installed"; continue; }
    # shellcheck disable=SC2086
    if out=$(podman --runtime "$rt" run --rm --label "$label" --no-healthcheck $ulimits \
               --entrypoint /usr/local/bin/fogline "$image" --version 2>&1); then
      runopts="--runtime $rt"
      break
    fi
    why="$why; $rt: $(echo "$out" | grep -v '^time=' | tail -1)"
  done
  if [ -n "$runopts" ]; then
    mode=container
    say "containers run here: podman $runopts with $ulimits${why:+ (not:${why#;})}"
  elif [ "$mode" = container ]; then
    fail "no container runs here:${why#;}"
  else
    mode=chroot
    say "no container runs here (${why#; }): chroot of the mounted image instead"
  fi
fi

node_env=(FL_IMAGE="$image" FL_IMAGE_MODE="$mode" FL_IMAGE_LABEL="$label" FL_BIN="$here/image-exec.sh"
  FL_SERVE_MODEL="$(podman image inspect "$image" --format '{{range .Config.Env}}{{println .}}{{end}}' \
                    | sed -n 's/^FOGLINE_MODEL=//p')")
if [ "$mode" = container ]; then
  node_env+=(FL_IMAGE_RUN_OPTS="$runopts" FL_IMAGE_ULIMITS="$ulimits")
  # the image as it is: its ENTRYPOINT and CMD, its port published, its health check
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  # shellcheck disable=SC2086
  cid=$(podman $runopts run -d --label "$label" $ulimits -p "127.0.0.1:$port:8080" "$image" 2>/dev/null)
  up=0
  for _ in $(seq 150); do
    if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then up=1; break; fi
    [ "$(podman inspect "$cid" --format '{{.State.Running}}')" = true ] || break
    sleep 0.2
  done
  [ "$up" = 1 ] || { podman logs "$cid" >&2; fail "the image's own CMD did not answer /health on its published port"; }
  podman healthcheck run "$cid" >/dev/null 2>&1 || fail "the image's HEALTHCHECK reports unhealthy"
  podman stop -t 20 "$cid" >/dev/null 2>&1
  code=$(podman inspect "$cid" --format '{{.State.ExitCode}}')
  [ "$code" = 0 ] || { podman logs "$cid" >&2; fail "podman stop: the server exited $code"; }
  podman rm "$cid" >/dev/null 2>&1
  say "ok: the image as it is (ENTRYPOINT+CMD, -p 127.0.0.1:$port:8080, HEALTHCHECK, stop exits 0)"
else
  mnt=$(podman image mount "$image")
  for d in dev proc sys; do mount --bind "/$d" "$mnt/$d"; binds+=("$mnt/$d"); done
  podman image inspect "$image" --format '{{range .Config.Env}}{{println .}}{{end}}' \
    | while IFS= read -r kv; do [ -z "$kv" ] || printf '%s\0' "$kv"; done > "$work/image.env"
  u=$(chroot "$mnt" id -u "$user") g=$(chroot "$mnt" id -g "$user")
  node_env+=(FL_IMAGE_ROOT="$mnt" FL_IMAGE_ENV="$work/image.env" FL_IMAGE_USER="$u:$g"
    FL_IMAGE_WORKDIR="$(inspect '{{.Config.WorkingDir}}')" FL_IMAGE_ENTRYPOINT="$entry")
fi

# The replicas get the environment docker-compose.yml gives them (x-fogline-env, ${VAR:-default}
# resolved); the tests' flags (--port, --threads, --redis: Redis is not at redis:6379 here) win
compose_env=$(python3 - "$here/docker-compose.yml" <<'EOF'
import re, sys, yaml
env = yaml.safe_load(open(sys.argv[1]))['x-fogline-env']
sub = lambda v: re.sub(r'\$\{(\w+):-([^}]*)\}', lambda m: m.group(2), str(v))
print(' '.join(f'{k}={sub(v)}' for k, v in env.items()))
EOF
)
say "the replicas' Compose environment: $compose_env"

t3=$(date +%s)
run_node() {
  local what=$1; shift
  say "running $what ($mode)"
  env "${node_env[@]}" "$@" || fail "$what failed with the image's server ($mode)"
}
cd "$root"
run_node "tests/server/ops.test.mjs (SIGTERM draining)" \
  node --test --test-name-pattern=SIGTERM tests/server/ops.test.mjs
run_node "tests/topology (two replicas of the image, Redis, nginx)" FL_IMAGE_ENV_EXTRA="$compose_env" \
  node --test tests/topology/proxy.test.mjs tests/topology/sessions.test.mjs
t4=$(date +%s)
say "ok: image $(( size / 1000000 )) MB; base $((t1 - t0)) s, build $((t2 - t1)) s, checks $((t4 - t2)) s ($mode)"
