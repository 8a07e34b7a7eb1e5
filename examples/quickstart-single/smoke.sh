#!/usr/bin/env bash
# Smoke test of quickstart-single with plain Docker (no denv):
#   bash examples/quickstart-single/smoke.sh
#
# Does by hand, in ONE container, what a single-sandbox provider does from compose.yaml + x-denv:
#   1. build the image (the app's and the verifier's)
#   2. run it as uid 1000 with the service's command, no network, wait for its healthcheck
#   3. verify the untouched episode                              -> expect reward 0.0
#   4. the scripted agent: agent/fix.sh piped in as uid 1000
#   5. verify again                                              -> expect reward 1.0
# Every verifier run is in the same container, as uid 1001, working dir /tests: fresh /tests
# (the tests, uid 1001's alone, mode 0700), /logs/verifier (the same) and /submission (root's,
# readable, holding the container's /workspace/app at /submission/workspace/app).
#
# Everything created is labelled ai.denv.scratch=quickstart-single and removed on exit (the
# image too, unless KEEP_IMAGE=1).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ID="quickstart-single-smoke-$$"
LABEL=(--label ai.denv.scratch=quickstart-single)
IMAGE="$ID:latest"
C="$ID"
APP_HEALTH="import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2)"
TMP=$(mktemp -d)

cleanup() {
  local rc=$?
  set +e
  docker rm -f "$C" >/dev/null 2>&1
  [ "${KEEP_IMAGE:-0}" = 1 ] || docker rmi "$IMAGE" >/dev/null 2>&1
  rm -rf "$TMP"
  echo "smoke: cleaned up $ID"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf 'smoke: %s\n' "$*"; }
die() { printf 'smoke: FAIL: %s\n' "$*" >&2; exit 1; }

# --- 1. the image ---------------------------------------------------------------------
docker build --force-rm "${LABEL[@]}" -t "$IMAGE" "$HERE/app" >"$TMP/build.log" 2>&1 \
  || { cat "$TMP/build.log" >&2; die "build failed"; }
log "built $IMAGE"

# --- 2. the episode: compose's command, user and healthcheck; x-denv's resources ----------
docker run -d --name "$C" "${LABEL[@]}" --network none --user 1000 \
  --memory 512m --cpus 1 --pids-limit 256 \
  --health-cmd "python3 -c \"$APP_HEALTH\"" --health-interval 1s --health-timeout 3s --health-retries 30 \
  "$IMAGE" python3 /workspace/app/server.py >/dev/null
deadline=$((SECONDS + 60))
until [ "$(docker inspect -f '{{.State.Health.Status}}' "$C")" = healthy ]; do
  [ "$SECONDS" -lt "$deadline" ] || { docker logs "$C" >&2; die "$C not healthy after 60 s"; }
  sleep 0.2
done
log "app healthy ($(docker exec "$C" id))"

# --- the verifier -----------------------------------------------------------------------
verify() { # prints the reward
  docker exec -u 0 "$C" sh -c 'set -e
    rm -rf /tests /logs/verifier /submission
    mkdir -p /tests /logs/verifier /submission/workspace
    chown 1001 /logs/verifier && chmod 700 /logs/verifier
    chmod 755 /logs /submission'
  docker cp -q "$HERE/tests/." "$C:/tests"
  docker exec -u 0 "$C" sh -c 'chown -R 1001 /tests && chmod 700 /tests'
  # The submission: /workspace/app as the agent left it, copied out, refused if it holds a
  # special file, copied back in root's and read-only to the verifier.
  rm -rf "$TMP/submission" && mkdir -p "$TMP/submission/workspace"
  docker cp -q "$C:/workspace/app" "$TMP/submission/workspace/app"
  bad=$(find "$TMP/submission" \( -type l -o -type p -o -type s -o -type b -o -type c -o -perm /6000 \) -print)
  [ -z "$bad" ] || die "special files in the submission: $bad"
  tar -C "$TMP" -c --owner=0 --group=0 --numeric-owner --mode=a+rX,go-w submission | docker cp -q - "$C:/"
  local rc=0
  docker exec -u 1001 -w /tests "$C" python3 /tests/test_app.py 2>&1 | sed 's/^/smoke:   | /' >&2 || rc=$?
  [ "$rc" = 0 ] || die "verifier exited $rc"
  docker exec -u 1001 "$C" python3 -c 'import json; print(json.load(open("/logs/verifier/reward.json"))["reward"])'
}

expect() { # name got want
  awk -v g="$2" -v w="$3" 'BEGIN { exit !(g + 0 == w + 0) }' || die "$1: reward $2, expected $3"
  log "$1: reward $2 (expected $3) OK"
}

# --- 3..5. untouched, agent, fixed ------------------------------------------------------
untouched=$(verify)
expect untouched "$untouched" 0.0
# The agent's user reads nothing of the verifier's (both are in place now).
docker exec -u 1000 "$C" cat /tests/expected.json >/dev/null 2>&1 && die "uid 1000 reads /tests"
docker exec -u 1000 "$C" ls /logs/verifier >/dev/null 2>&1 && die "uid 1000 reads /logs/verifier"
log "uid 1000 reads neither /tests nor /logs/verifier"

log "agent: agent/fix.sh piped into $C as uid 1000"
docker exec -i -u 1000 -w /workspace "$C" bash -s <"$HERE/agent/fix.sh" 2>&1 | sed 's/^/smoke:   > /'

fixed=$(verify)
expect fixed "$fixed" 1.0
log "PASS: untouched $untouched, fixed $fixed"
