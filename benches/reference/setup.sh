#!/usr/bin/env bash
# The Python for benches/reference/relay.py, in a venv under ~/.cache:
#   BENCH_REFERENCE_PYTHON=$(benches/reference/setup.sh) cargo bench --bench relay -- latency
set -euo pipefail
venv="${XDG_CACHE_HOME:-$HOME/.cache}/walrelay/reference-venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q psycopg2-binary==2.9.13 confluent-kafka==2.16.1 >&2
fi
echo "$venv/bin/python"
