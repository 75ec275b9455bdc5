#!/usr/bin/env bash
# image-exec.sh ARGS...: runs the fogline image's ENTRYPOINT with ARGS (in place of its CMD),
# in the foreground, as if it were the fogline binary. docker/build-test.sh points the Node
# suites' FL_BIN at this script, so the existing server and topology tests drive the server of
# the built image instead of the one in build/.
#
#   FL_IMAGE       the image (localhost/fogline:cpu-test)
#   FL_IMAGE_MODE  container: `podman run` on the host network with FL_IMAGE_RUN_OPTS (the
#                  runtime and ulimits build-test.sh found to work here), labelled
#                  FL_IMAGE_LABEL so that build-test.sh can remove what is left over;
#                  chroot: the image's filesystem at FL_IMAGE_ROOT (`podman image mount`),
#                  with the image's ENV, USER, WORKDIR and ENTRYPOINT, which build-test.sh read
#                  from `podman image inspect` into FL_IMAGE_ENV (NUL-separated NAME=value
#                  file), FL_IMAGE_USER (uid:gid), FL_IMAGE_WORKDIR, FL_IMAGE_ENTRYPOINT.
# Either way FOGLINE_TEST_* variables (the tests' engine hold, docs/robustness.md) pass in,
# and FL_IMAGE_ENV_EXTRA (NAME=value words: what docker-compose.yml sets for a replica) is
# added; no other variable of the caller reaches the server.
#
# Signals: in a chroot this process becomes the server (exec), so every signal reaches it. In
# a container, this script forwards SIGTERM, SIGINT, SIGHUP, SIGUSR1/2 to the server's pid;
# SIGKILL cannot be forwarded, so a watcher kills the container when this script dies of it
# (the topology test kills a replica so).
set -euo pipefail
: "${FL_IMAGE_MODE:?}"
pass=()
while IFS='=' read -r name _; do
  case "$name" in FOGLINE_TEST_*) pass+=(-e "$name") ;; esac
done < <(env)
# shellcheck disable=SC2206  # NAME=value words without spaces (build-test.sh makes them)
extra=(${FL_IMAGE_ENV_EXTRA:-})

case "$FL_IMAGE_MODE" in
  container)
    : "${FL_IMAGE:?}" "${FL_IMAGE_LABEL:?}"
    name="fogline-test-$$-$RANDOM"
    pidfile=$(mktemp -u "${TMPDIR:-/tmp}/fogline-test-pid.XXXXXX")
    me=$$
    # the watcher: once this script is gone (SIGKILL included), so is the container
    (
      exec </dev/null >/dev/null 2>&1
      while kill -0 "$me" 2>/dev/null; do sleep 0.2; done
      podman kill --signal KILL "$name" || true
      podman rm -f "$name" || true
      rm -f "$pidfile"
    ) &
    # shellcheck disable=SC2086  # FL_IMAGE_RUN_OPTS, FL_IMAGE_ULIMITS are lists of options
    podman ${FL_IMAGE_RUN_OPTS:-} run --rm --name "$name" --label "$FL_IMAGE_LABEL" \
      --pidfile "$pidfile" --network host --sig-proxy=false --no-healthcheck ${FL_IMAGE_ULIMITS:-} \
      "${pass[@]}" "${extra[@]/#/--env=}" "$FL_IMAGE" "$@" &
    podman_pid=$!
    # Signals go to the server's host pid, which conmon writes before the container starts (so
    # before the server can log anything a test waits for). podman's own --sig-proxy drops a
    # signal that comes before podman has marked the container running: a race with the
    # server's first log line.
    forward() { [ -s "$pidfile" ] && kill -s "$1" "$(cat "$pidfile")" 2>/dev/null || true; }
    for sig in TERM INT HUP USR1 USR2; do
      # shellcheck disable=SC2064
      trap "forward $sig" "$sig"
    done
    # wait returns >128 when a trapped signal interrupts it; wait again until podman is done
    while :; do
      rc=0
      wait "$podman_pid" || rc=$?
      kill -0 "$podman_pid" 2>/dev/null || exit "$rc"
    done
    ;;
  chroot)
    : "${FL_IMAGE_ROOT:?}" "${FL_IMAGE_ENV:?}" "${FL_IMAGE_USER:?}" "${FL_IMAGE_WORKDIR:?}"
    : "${FL_IMAGE_ENTRYPOINT:?}"
    envs=()
    while IFS= read -r -d '' kv; do envs+=("$kv"); done < "$FL_IMAGE_ENV"
    for p in "${pass[@]}"; do [ "$p" = -e ] || envs+=("$p=${!p}"); done
    envs+=("${extra[@]}")
    # shellcheck disable=SC2206  # the entrypoint is a list of words (build-test.sh checks it)
    entry=($FL_IMAGE_ENTRYPOINT)
    # env -i: nothing of the caller's environment; sh cds to WORKDIR and execs, so the server
    # keeps this pid
    exec chroot --userspec="$FL_IMAGE_USER" "$FL_IMAGE_ROOT" /usr/bin/env -i "${envs[@]}" \
      /bin/sh -c 'cd "$0" && exec "$@"' "$FL_IMAGE_WORKDIR" "${entry[@]}" "$@"
    ;;
  *) echo "image-exec.sh: FL_IMAGE_MODE must be container or chroot, not '$FL_IMAGE_MODE'" >&2; exit 2 ;;
esac
