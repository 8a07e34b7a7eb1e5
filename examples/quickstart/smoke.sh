#!/usr/bin/env bash
# Smoke test of the quickstart environment with plain Docker (no denv).
#
# Does by hand what denv does from compose.yaml + x-denv:
#   1. build the app, db and verifier images
#   2. episode: an internal network, the `dbdata` volume, db then app (as compose would:
#      aliases, healthchecks, caps, limits), wait for health
#   3. verify the untouched episode                                   -> expect reward 0.0
#   4. the scripted agent: agent/fix.sh piped into the app as uid 1000
#   5. verify again                                                   -> expect reward 1.0
#   6. fork: pause, commit the app's writable layer, copy the volume, unpause; start the
#      fork's services fresh on a new internal network; verify there  -> expect reward 1.0
# Every verifier run: its own container from its own image, uid 1001, working dir /tests,
# tests copied in (docker cp into a created-not-started container), a fresh
# /logs/verifier owned by 1001, the submission (/workspace/app of the graded app) at
# /submission/workspace/app, read-only to it.
#
# Everything created carries ai.denv.managed=true and is removed on exit (images too,
# unless KEEP_IMAGES=1).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ID="qs-smoke-$$"
LABELS=(--label ai.denv.managed=true --label ai.denv.role=probe --label "ai.denv.smoke=$ID")
SEC=(--cap-drop ALL --security-opt no-new-privileges)
APP_HEALTH="import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2)"

CONTAINERS=() NETWORKS=() VOLUMES=() IMAGES=()
TMP=$(mktemp -d)
FAILED=0

cleanup() {
  local rc=$?
  set +e
  ((${#CONTAINERS[@]})) && docker rm -f -v "${CONTAINERS[@]}" >/dev/null 2>&1
  ((${#NETWORKS[@]})) && docker network rm "${NETWORKS[@]}" >/dev/null 2>&1
  ((${#VOLUMES[@]})) && docker volume rm "${VOLUMES[@]}" >/dev/null 2>&1
  if [ "${KEEP_IMAGES:-0}" != 1 ] && ((${#IMAGES[@]})); then
    docker rmi "${IMAGES[@]}" >/dev/null 2>&1
  fi
  rm -rf "$TMP"
  left=$(docker ps -aq --filter "label=ai.denv.smoke=$ID"; docker network ls -q --filter "label=ai.denv.smoke=$ID"; docker volume ls -q --filter "label=ai.denv.smoke=$ID")
  [ -n "$left" ] && echo "smoke: WARNING: left behind: $left" >&2
  echo "smoke: cleaned up $ID"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ms() { date +%s%3N; }
log() { printf 'smoke: %s\n' "$*"; }
die() { printf 'smoke: FAIL: %s\n' "$*" >&2; exit 1; }

docker info >/dev/null 2>&1 || die "no Docker engine (start it: (dockerd >/var/log/dockerd.log 2>&1 &))"
docker image inspect debian:bookworm-slim >/dev/null 2>&1 \
  || die "base image debian:bookworm-slim missing (build it: deploy/base-image)"

# --- 1. images ------------------------------------------------------------------------
build() { # name context
  local tag="$ID-$1:latest" t0
  t0=$(ms)
  docker build --label ai.denv.managed=true --label "ai.denv.smoke=$ID" -t "$tag" "$2" \
    >"$TMP/build-$1.log" 2>&1 || { cat "$TMP/build-$1.log" >&2; die "build of $1 failed"; }
  IMAGES+=("$tag")
  log "built $1 in $(( $(ms) - t0 )) ms ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
}
T0=$(ms)
build db "$HERE/db"
build app "$HERE/app"
build verifier "$HERE/verifier"
log "images built in $(( $(ms) - T0 )) ms"

# --- 2. episode -----------------------------------------------------------------------
new_network() { docker network create --internal "${LABELS[@]}" "$1" >/dev/null; NETWORKS+=("$1"); }
new_volume() { docker volume create "${LABELS[@]}" "$1" >/dev/null; VOLUMES+=("$1"); }

start_db() { # name network volume
  docker run -d --name "$1" --network "$2" --network-alias db "${LABELS[@]}" "${SEC[@]}" \
    -v "$3:/data" --memory 256m --cpus 0.5 --pids-limit 64 --stop-timeout 5 \
    --health-cmd 'redis-cli ping | grep -q PONG' --health-interval 1s --health-timeout 3s --health-retries 30 \
    "$ID-db:latest" >/dev/null
  CONTAINERS+=("$1")
}
start_app() { # name network image
  docker run -d --name "$1" --network "$2" --network-alias app "${LABELS[@]}" "${SEC[@]}" \
    --user 1000 -w /workspace -e REDIS_HOST=db -e REDIS_PORT=6379 \
    --memory 512m --cpus 1 --pids-limit 256 --stop-timeout 5 \
    --health-cmd "python3 -c \"$APP_HEALTH\"" --health-interval 1s --health-timeout 3s --health-retries 30 \
    "$3" >/dev/null
  CONTAINERS+=("$1")
}
wait_healthy() { # container
  local deadline=$(( $(ms) + 60000 )) s
  while :; do
    s=$(docker inspect -f '{{.State.Health.Status}}' "$1")
    [ "$s" = healthy ] && return 0
    if [ "$s" = unhealthy ] || [ "$(ms)" -gt "$deadline" ]; then
      docker logs "$1" >&2 || true
      die "$1 is $s"
    fi
    sleep 0.1
  done
}
start_stack() { # prefix network volume app-image
  start_db "$1-db" "$2" "$3"
  wait_healthy "$1-db"          # depends_on: db: condition: service_healthy
  start_app "$1-app" "$2" "$4"
  wait_healthy "$1-app"
}

NET="$ID" VOL="$ID-dbdata"
T0=$(ms)
new_network "$NET"
new_volume "$VOL"
start_stack "$ID" "$NET" "$VOL" "$ID-app:latest"
log "episode up from a fresh volume (seeding included) in $(( $(ms) - T0 )) ms"
docker logs "$ID-db" 2>&1 | grep 'db-entrypoint' | sed 's/^/smoke:   /'

# --- verifier -------------------------------------------------------------------------
RUN=0
verify() { # network app-container expected-reward
  RUN=$((RUN + 1))
  local net=$1 app=$2 want=$3 c="$ID-verifier-$RUN" d="$TMP/verify-$RUN" got bad t0
  t0=$(ms)
  mkdir -p "$d/logs/verifier" "$d/submission/workspace"
  # submission: /workspace/app of the graded app, refusing special files (protection 3)
  docker cp "$app:/workspace/app" "$d/submission/workspace/app"
  bad=$(find "$d/submission" \( -type l -o -type p -o -type s -o -type b -o -type c -o -perm /6000 \) -print)
  [ -z "$bad" ] || die "special files in the submission: $bad"
  docker create --name "$c" --network "$net" --user 1001 -w /tests "${LABELS[@]}" "${SEC[@]}" \
    --memory 512m --cpus 1 --pids-limit 256 \
    "$ID-verifier:latest" python3 /tests/test_app.py >/dev/null
  CONTAINERS+=("$c")
  docker cp "$HERE/tests/." "$c:/tests"
  tar -C "$d" -c --owner=1001 --group=1001 --numeric-owner logs | docker cp - "$c:/"
  tar -C "$d" -c --owner=0 --group=0 --numeric-owner --mode=a+rX,go-w submission | docker cp - "$c:/"
  log "verifier run $RUN (uid 1001, network $net, grading $app):"
  docker start -a "$c" 2>&1 | sed 's/^/smoke:   | /' || true
  [ "$(docker inspect -f '{{.State.ExitCode}}' "$c")" = 0 ] || die "verifier exited $(docker inspect -f '{{.State.ExitCode}}' "$c")"
  docker cp "$c:/logs/verifier/reward.json" - | tar -xO >"$d/reward.json"
  got=$(tr -d ' \n' <"$d/reward.json")
  docker rm -f "$c" >/dev/null
  if awk -v g="$(sed 's/.*"reward":\([0-9.eE+-]*\).*/\1/' <<<"$got")" -v w="$want" 'BEGIN{exit !(g+0==w+0)}'; then
    log "reward.json $got == expected $want  OK ($(( $(ms) - t0 )) ms)"
  else
    log "reward.json $got != expected $want  FAIL"
    FAILED=1
  fi
}

# --- 3..5. untouched, agent, fixed ----------------------------------------------------
verify "$NET" "$ID-app" 0.0

log "agent: agent/fix.sh piped into $ID-app as uid 1000"
docker exec -i -u 1000 -w /workspace "$ID-app" bash -s <"$HERE/agent/fix.sh" 2>&1 | sed 's/^/smoke:   > /'

verify "$NET" "$ID-app" 1.0

# --- 6. fork: services start fresh from the episode's disk state -------------------------
T0=$(ms)
docker pause "$ID-db" "$ID-app" >/dev/null
docker commit --pause=false -c 'LABEL ai.denv.managed=true' -c "LABEL ai.denv.smoke=$ID" \
  "$ID-app" "$ID-app-fork:latest" >/dev/null
IMAGES+=("$ID-app-fork:latest")
new_volume "$VOL-fork"
docker run --rm --network none "${LABELS[@]}" -v "$VOL:/from:ro" -v "$VOL-fork:/to" debian:bookworm-slim \
  sh -c 'tar -C /from -cf - . | tar -C /to -xpf -'
docker unpause "$ID-db" "$ID-app" >/dev/null
log "snapshot (pause, commit app, copy volume, unpause) in $(( $(ms) - T0 )) ms"
T0=$(ms)
new_network "$ID-fork"
start_stack "$ID-fork" "$ID-fork" "$VOL-fork" "$ID-app-fork:latest"
log "fork up (fresh services from the snapshot) in $(( $(ms) - T0 )) ms"
docker logs "$ID-fork-db" 2>&1 | grep -q 'db-entrypoint: seeded' && die "fork re-seeded its volume"

verify "$ID-fork" "$ID-fork-app" 1.0

if [ "$FAILED" = 0 ]; then log "PASS: untouched 0.0, fixed 1.0, fork of the fixed episode 1.0"; else die "rewards differ from the expected ones"; fi
