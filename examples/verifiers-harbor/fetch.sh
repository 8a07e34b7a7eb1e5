#!/usr/bin/env bash
# Fills main/offline/, part of main's build context, with what main's image installs with no
# network: Python 3 from Debian 12 (the .deb files debian:bookworm-slim lacks), uv, and wheels of
# the dependencies of verifiers' chat program (the PEP 723 script every verifiers harness runs,
# verifiers/v1/harnesses/utils/launch.py). Runs on the host, a Debian 12 machine whose apt and
# pip reach their mirrors; nothing in a container downloads anything. Idempotent.
#
#   examples/verifiers-harbor/fetch.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py="$root/python/.venv/bin/python"
[ -x "$py" ] || py=python3
# Downloaded once per version of this script, then copied into the build context.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/denv/verifiers-harbor/$(sha256sum "$0" | cut -c1-16)"
out="$here/main/offline"
if [ ! -f "$cache/.complete" ]; then
mkdir -p "$cache/debs/partial" "$cache/wheels"

# apt computes what the image lacks from the image's own package status, then downloads it.
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
docker run --rm --network none debian:bookworm-slim cat /var/lib/dpkg/status >"$state/status"
download() {
  apt-get install --download-only --no-install-recommends -y -qq -o APT::Sandbox::User=root \
    -o Dir::State::status="$state/status" -o Dir::Cache::archives="$cache/debs" python3 >/dev/null
}
download || { apt-get update -qq && download; }
rm -rf "$cache/debs/partial" "$cache/debs/lock"

# verifiers 0.4.0's chat program: dependencies = ["openai", "mcp==2.0.0", "httpx", "httpx2",
# "tenacity", "certifi"], for the image's Python (3.11), and uv itself.
"$py" -m pip download --quiet --dest "$cache/wheels" --only-binary=:all: \
  --python-version 3.11 --implementation cp --abi cp311 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 --platform linux_x86_64 \
  openai 'mcp==2.0.0' httpx httpx2 tenacity certifi uv
# A PEP 503 index of those wheels (offline/simple/NAME/index.html): uv's `sync --script` has no
# environment variable for --no-index, but takes its default index from UV_DEFAULT_INDEX.
"$py" - "$cache" <<'PY'
import pathlib, re, sys

out = pathlib.Path(sys.argv[1])
for wheel in sorted((out / "wheels").glob("*.whl")):
    name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    page = out / "simple" / name / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    links = page.read_text() if page.exists() else ""
    page.write_text(f'{links}<a href="../../wheels/{wheel.name}">{wheel.name}</a>\n')
PY
touch "$cache/.complete"
fi
rm -rf "$out/debs" "$out/wheels" "$out/simple"
cp -r "$cache/debs" "$cache/wheels" "$cache/simple" "$out/"
