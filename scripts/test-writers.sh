#!/usr/bin/env bash
# The writer examples are known to work: examples/writers/*.ts are
# type-checked by tsc against the real npm packages (versions pinned in
# examples/writers/package-lock.json), and the Drizzle one writes an order
# into a test Postgres while walrelay streams; tests/writers.rs reads its
# event back from Kafka. node_modules is cached in examples/writers/ (not
# committed) and reinstalled only when package-lock.json changes.
set -euo pipefail
cd "$(dirname "$0")/../examples/writers"

stamp=node_modules/.walrelay-lock
if ! cmp -s package-lock.json "$stamp" 2>/dev/null; then
  echo "installing the writer examples' npm packages"
  # --ignore-scripts: Prisma's install scripts would download engine
  # binaries; type-checking needs none of them.
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi
# Prisma's client types come from schema.prisma. Generating them runs on the
# CLI's bundled WebAssembly; the engine paths only stop it from downloading
# binaries it does not use for this.
client=node_modules/.prisma/client/index.d.ts
if [ ! -f "$client" ] || [ schema.prisma -nt "$client" ]; then
  PRISMA_SCHEMA_ENGINE_BINARY=/bin/true PRISMA_QUERY_ENGINE_LIBRARY=/bin/true \
    npx --no-install prisma generate --schema schema.prisma >/dev/null
fi
echo "type-checking examples/writers/*.ts"
npx --no-install tsc -p .

cd ../..
cargo test --test writers -- --ignored --test-threads=1
