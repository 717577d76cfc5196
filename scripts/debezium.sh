#!/usr/bin/env bash
# Kafka Connect (standalone) with Debezium's PostgreSQL connector and its
# outbox EventRouter, from the plain jars on Maven Central: the oracle that
# tests/debezium_oracle.rs compares walrelay with.
#
#   scripts/debezium.sh fetch               fetch the jars once (mvn, pom in
#                                           scripts/debezium/) and print their folder
#   scripts/debezium.sh start DIR BROKERS PORT CONNECTOR.properties...
#                                           start a worker in the background that
#                                           produces to BROKERS, its REST API on
#                                           127.0.0.1:PORT, its offsets and log in
#                                           DIR; waits until every connector and
#                                           task is RUNNING
#   scripts/debezium.sh stop DIR            stop it (SIGTERM, then SIGKILL after 30 s)
#   scripts/debezium.sh run DIR BROKERS PORT CONNECTOR.properties...
#                                           the worker in the foreground (exec), as
#                                           the tests start it: same flags, same pid
#
# DIR keeps worker.properties, connect.offsets (so a second start resumes
# where the connectors left off), connect.log and connect.pid. The jars live
# in ${WALRELAY_CACHE:-$HOME/.cache/walrelay}/debezium-VERSION/: libs/ is the
# worker's classpath (connect-runtime, connect-json, connect-transforms),
# plugins/debezium-connector-postgres/ the connector, loaded through
# plugin.path as in a user's Connect. WALRELAY_DEBEZIUM_HOME names another folder.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tag=debezium.sh
# shellcheck source=scripts/background-jvm.sh
. "$here/background-jvm.sh"
pom="$here/debezium/pom.xml"
version="$(sed -n 's|.*<debezium.version>\(.*\)</debezium.version>.*|\1|p' "$pom")"
kafka_version="$(sed -n 's|.*<kafka.version>\(.*\)</kafka.version>.*|\1|p' "$pom")"
cache="${WALRELAY_CACHE:-$HOME/.cache/walrelay}"
home="${WALRELAY_DEBEZIUM_HOME:-$cache/debezium-$version}"
plugin="debezium-connector-postgres"

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
  exit 2
}

# Connect's jars in libs/, Debezium's as a plugin in plugins/ (each
# profile's main jar must be among them).
copy_jars() {
  mvn -B -f "$pom" -Pworker dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$1/libs" \
    && mvn -B -f "$pom" -Pplugin dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$1/plugins/$plugin" \
    && [ -f "$1/libs/connect-runtime-$kafka_version.jar" ] \
    && [ -f "$1/plugins/$plugin/$plugin-$version.jar" ]
}

fetch() {
  fetch_once "$home" "$pom" "Kafka Connect $kafka_version and Debezium $version's jars"
}

need_libs() {
  need_jars "$home"
}

# A small JVM beside Postgres, a broker and walrelay on 2 cores, as in
# scripts/kafka.sh: C1 only (it starts faster), the serial collector, a
# small heap; slf4j-simple logs with times, without the configuration dumps.
jvm_flags=(
  -Xms128m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
  -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
  -Dorg.slf4j.simpleLogger.showDateTime=true
  -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS
  -Dorg.slf4j.simpleLogger.log.org.apache.kafka.common.config=warn
  -Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn
  -Dorg.slf4j.simpleLogger.log.org.apache.kafka.connect.runtime.isolation=warn
  -Dorg.slf4j.simpleLogger.log.org.apache.kafka.connect.runtime.rest.RestServer=warn
  -Dorg.eclipse.jetty.LEVEL=WARN
)

write_config() {
  local dir="$1" brokers="$2" port="$3"
  cat >"$dir/worker.properties" <<EOF
# Written by scripts/debezium.sh: one standalone Kafka Connect worker.
bootstrap.servers=$brokers
listeners=http://127.0.0.1:$port
# Standalone keeps its source offsets (the slot's LSN) in a file.
offset.storage.file.filename=$dir/connect.offsets
offset.flush.interval.ms=1000
plugin.path=$home/plugins
# Every plugin here has its ServiceLoader manifests: no classpath scan.
plugin.discovery=service_load
# Connectors override these, as a user's do.
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
EOF
}

# Writes the configuration and becomes the worker.
run() {
  [ $# -ge 4 ] || usage
  local dir brokers port
  dir="$(mkdir -p "$1" && cd "$1" && pwd)"
  brokers="$2"
  port="$3"
  shift 3
  need_libs
  write_config "$dir" "$brokers" "$port"
  exec java "${jvm_flags[@]}" -cp "$home/libs/*" \
    org.apache.kafka.connect.cli.ConnectStandalone "$dir/worker.properties" "$@"
}

is_worker() {
  runs "$1" "ConnectStandalone |debezium\.sh run "
}

# The state of the connector named in properties file $2 and its tasks, as
# the REST API on port $1 says: running, failed (with the trace printed),
# or starting.
connector_state() {
  local name status
  name="$(sed -n 's/^name *[=:] *//p' "$2" | head -n1)"
  status="$(curl -fsS "http://127.0.0.1:$1/connectors/$name/status" 2>/dev/null)" || { echo starting; return; }
  # {"name":…,"connector":{"state":"RUNNING",…},"tasks":[{"id":0,"state":"RUNNING",…}],…}
  case "$status" in
    *'"state":"FAILED"'*) echo "debezium.sh: connector $name failed: $status" >&2; echo failed ;;
    *) if [ "$(grep -o '"state":"RUNNING"' <<<"$status" | wc -l)" -ge 2 ]; then echo running; else echo starting; fi ;;
  esac
}

start() {
  [ $# -ge 4 ] || usage
  local dir="$1" port="$3" begun from pid file ready
  need_libs
  command -v curl >/dev/null || { echo "debezium.sh: curl is missing" >&2; exit 1; }
  mkdir -p "$dir"
  if [ -f "$dir/connect.pid" ] && is_worker "$(cat "$dir/connect.pid")"; then
    echo "debezium.sh: a worker already runs from $dir (pid $(cat "$dir/connect.pid"))" >&2
    exit 1
  fi
  from=1
  [ ! -f "$dir/connect.log" ] || from="$(( $(wc -l <"$dir/connect.log") + 1 ))"
  begun="$(date +%s%N)"
  bash "$0" run "$@" >>"$dir/connect.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/connect.pid"
  for _ in $(seq 1 600); do
    ready=true
    for file in "${@:4}"; do
      case "$(connector_state "$port" "$file")" in
        running) ;;
        failed) show_log "$dir/connect.log" "$from" "ERROR|Exception"; stop "$dir"; exit 1 ;;
        *) ready=false; break ;;
      esac
    done
    if $ready; then
      echo "Kafka Connect $kafka_version with Debezium $version, REST on 127.0.0.1:$port (pid $pid), running in $(( ($(date +%s%N) - begun) / 1000000 )) ms"
      return
    fi
    if ! alive "$pid"; then
      echo "debezium.sh: the worker exited before its connectors ran" >&2
      show_log "$dir/connect.log" "$from" "ERROR|Exception"
      rm -f "$dir/connect.pid"
      exit 1
    fi
    sleep 0.2
  done
  echo "debezium.sh: the connectors did not run within 120 s" >&2
  show_log "$dir/connect.log" "$from" "ERROR|Exception"
  stop "$dir"
  exit 1
}

stop() {
  [ $# -eq 1 ] || usage
  stop_pid_file "$1/connect.pid" "ConnectStandalone |debezium\.sh run "
}

case "${1:-}" in
  fetch) fetch ;;
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
