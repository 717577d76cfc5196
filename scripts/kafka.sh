#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft, broker and controller in one JVM)
# for walrelay's tests, from the plain jars on Maven Central.
#
#   scripts/kafka.sh fetch                  fetch the jars once (mvn, pom in
#                                           scripts/kafka/) and print their folder
#   scripts/kafka.sh start DIR PORT [CPORT] start a broker in the background on
#                                           127.0.0.1:PORT (controller on CPORT,
#                                           PORT+1 by default), its data and log
#                                           in DIR; waits until it serves
#   scripts/kafka.sh stop DIR               stop it (SIGTERM, then SIGKILL after 30 s)
#   scripts/kafka.sh run DIR PORT [CPORT]   the broker in the foreground (exec), as
#                                           the tests start it: same flags, same pid
#
# DIR keeps server.properties, data/ (formatted once with StorageTool, so a
# second start keeps every topic and offset), broker.log and broker.pid.
#
# WALRELAY_KAFKA_SECURITY=sasl-scram makes PORT a SASL_PLAINTEXT listener
# (SCRAM-SHA-512) with StandardAuthorizer ACLs: no ACL means no access, and
# User:admin is a super user. WALRELAY_KAFKA_USERS lists the SCRAM users as
# NAME=PASSWORD, space-separated (default admin=admin-secret); admin must be
# one. They are created when data/ is formatted, so they apply to a new DIR.
#
# WALRELAY_KAFKA_SECURITY=sasl-gssapi makes PORT a SASL_PLAINTEXT listener
# that takes Kerberos (GSSAPI) logins. The broker is WALRELAY_KAFKA_PRINCIPAL
# (SERVICE/HOST@REALM, e.g. kafka/localhost@WALRELAY.TEST; it advertises
# HOST:PORT) with the key in WALRELAY_KAFKA_KEYTAB, and its JVM reads the
# realm from WALRELAY_KAFKA_KRB5_CONF (never /etc/krb5.conf). A PLAINTEXT
# listener on WALRELAY_KAFKA_PLAIN_PORT (CPORT+1 by default) serves the
# broker itself and clients without a ticket. No ACLs.
#
# WALRELAY_KAFKA_SECURITY=oauthbearer makes PORT a SASL_PLAINTEXT listener
# that takes OAUTHBEARER tokens, checked by OAuthBearerValidatorCallbackHandler
# against the JWKS at WALRELAY_KAFKA_JWKS_URL (required; the JVM is allowed
# that URL and no other, as Kafka 4 wants), with the issuer and audience in
# WALRELAY_KAFKA_OAUTH_ISSUER and WALRELAY_KAFKA_OAUTH_AUDIENCE when set. A
# PLAINTEXT listener on WALRELAY_KAFKA_PLAIN_PORT (CPORT+1 by default) serves
# the broker itself and clients without a token. No ACLs.
#
# WALRELAY_KAFKA_TRANSACTION_REPLICATION (1 by default) sets
# transaction.state.log.replication.factor: above 1 on this single node, no
# transaction can start (what a test of that failure needs).
#
# The jars live in ${WALRELAY_CACHE:-$HOME/.cache/walrelay}/kafka-VERSION/libs
# (WALRELAY_KAFKA_LIBS names another folder), never in the repository.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tag=kafka.sh
# shellcheck source=scripts/background-jvm.sh
. "$here/background-jvm.sh"
pom="$here/kafka/pom.xml"
version="$(sed -n 's|.*<kafka.version>\(.*\)</kafka.version>.*|\1|p' "$pom")"
cache="${WALRELAY_CACHE:-$HOME/.cache/walrelay}"
libs="${WALRELAY_KAFKA_LIBS:-$cache/kafka-$version/libs}"

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
  exit 2
}

# The broker's jars (kafka_2.13 must be among them, or Maven fetched
# something else).
copy_jars() {
  mvn -B -f "$pom" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$1" \
    && [ -f "$1/kafka_2.13-$version.jar" ]
}

fetch() {
  fetch_once "$libs" "$pom" "Apache Kafka $version's jars"
}

need_libs() {
  need_jars "$libs"
}

# A small JVM beside Postgres on 2 cores: C1 only (it starts faster), the
# serial collector, a small heap; slf4j-simple logs with times, without the
# configuration dumps.
jvm_flags=(
  -Xms128m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
  -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
  -Dorg.slf4j.simpleLogger.showDateTime=true
  -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS
  -Dorg.slf4j.simpleLogger.log.org.apache.kafka.common.config=warn
  -Dorg.slf4j.simpleLogger.log.kafka.server.KafkaConfig=warn
)

security="${WALRELAY_KAFKA_SECURITY:-}"
users="${WALRELAY_KAFKA_USERS:-admin=admin-secret}"
jwks_url="${WALRELAY_KAFKA_JWKS_URL:-}"

check_security() {
  case "$security" in
    "") ;;
    sasl-scram)
      admin_password >/dev/null \
        || { echo "kafka.sh: WALRELAY_KAFKA_USERS has no admin=PASSWORD" >&2; exit 2; } ;;
    sasl-gssapi) check_gssapi ;;
    oauthbearer)
      [ -n "$jwks_url" ] \
        || { echo "kafka.sh: oauthbearer needs WALRELAY_KAFKA_JWKS_URL" >&2; exit 2; }
      # Since Kafka 4.0 the JVM fetches no token or JWKS URL it was not allowed.
      jvm_flags+=("-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$jwks_url") ;;
    *) echo "kafka.sh: WALRELAY_KAFKA_SECURITY=$security: say sasl-scram, sasl-gssapi or oauthbearer, or leave it unset" >&2; exit 2 ;;
  esac
}

admin_password() {
  local user
  for user in $users; do
    [ "${user%%=*}" != admin ] || { echo "${user#*=}"; return 0; }
  done
  return 1
}

# The listeners: PLAINTEXT, SASL_PLAINTEXT (SCRAM) with ACLs, or
# SASL_PLAINTEXT (GSSAPI or OAUTHBEARER) beside a PLAINTEXT one.
write_listeners() {
  local port="$1" cport="$2"
  if [ "$security" = sasl-gssapi ]; then
    write_gssapi_listeners "$port" "$cport"
    return
  fi
  if [ "$security" = oauthbearer ]; then
    write_oauthbearer_listeners "$port" "$cport"
    return
  fi
  if [ -z "$security" ]; then
    cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
EOF
    return
  fi
  cat <<EOF
# Clients log in with SCRAM-SHA-512. The controller listener, on 127.0.0.1
# only, stays PLAINTEXT: its principal, ANONYMOUS, is this node talking to
# its own controller, which must be a super user.
listeners=SASL_PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(admin_password)";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:ANONYMOUS
EOF
}

krb5_conf="${WALRELAY_KAFKA_KRB5_CONF:-}"
keytab="${WALRELAY_KAFKA_KEYTAB:-}"
principal="${WALRELAY_KAFKA_PRINCIPAL:-}"

# SERVICE/HOST@REALM, a keytab and a krb5.conf, all required: a broker
# that fell back on the system's Kerberos set-up would test nothing.
check_gssapi() {
  [[ "$principal" =~ ^[^/@]+/[^/@]+@[^/@]+$ ]] \
    || { echo "kafka.sh: sasl-gssapi needs WALRELAY_KAFKA_PRINCIPAL=SERVICE/HOST@REALM" >&2; exit 2; }
  [ -f "$keytab" ] || { echo "kafka.sh: sasl-gssapi needs WALRELAY_KAFKA_KEYTAB, a keytab file" >&2; exit 2; }
  [ -f "$krb5_conf" ] || { echo "kafka.sh: sasl-gssapi needs WALRELAY_KAFKA_KRB5_CONF, a krb5.conf" >&2; exit 2; }
  # The JVM's replay cache in memory, not a file under /var/tmp.
  jvm_flags+=("-Djava.security.krb5.conf=$krb5_conf" -Dsun.security.krb5.rcache=none)
}

write_gssapi_listeners() {
  local port="$1" cport="$2" pport="${WALRELAY_KAFKA_PLAIN_PORT:-$(($2 + 1))}"
  local service="${principal%%/*}" host="${principal#*/}"
  host="${host%@*}"
  cat <<EOF
# Clients log in with Kerberos: a ticket for $principal, which the
# broker accepts with its key from the keytab. A client asks for the ticket
# of the host it connects to, so the listener is advertised as $host.
# The broker's own connections use the PLAINTEXT listener INTERNAL.
listeners=SASL_PLAINTEXT://127.0.0.1:$port,INTERNAL://127.0.0.1:$pport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=SASL_PLAINTEXT://$host:$port,INTERNAL://127.0.0.1:$pport
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
sasl.enabled.mechanisms=GSSAPI
sasl.kerberos.service.name=$service
listener.name.sasl_plaintext.gssapi.sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="$keytab" principal="$principal";
EOF
}

write_oauthbearer_listeners() {
  local port="$1" cport="$2" pport="${WALRELAY_KAFKA_PLAIN_PORT:-$(($2 + 1))}"
  cat <<EOF
# Clients log in with an OAUTHBEARER token (a JWT) that the broker checks
# against the identity provider's JWKS: its signature, expiry, issuer and
# audience. The broker's own connections use the PLAINTEXT listener INTERNAL.
listeners=SASL_PLAINTEXT://127.0.0.1:$port,INTERNAL://127.0.0.1:$pport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$port,INTERNAL://127.0.0.1:$pport
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
sasl.enabled.mechanisms=OAUTHBEARER
listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=$jwks_url
EOF
  [ -z "${WALRELAY_KAFKA_OAUTH_ISSUER:-}" ] || echo "sasl.oauthbearer.expected.issuer=$WALRELAY_KAFKA_OAUTH_ISSUER"
  [ -z "${WALRELAY_KAFKA_OAUTH_AUDIENCE:-}" ] || echo "sasl.oauthbearer.expected.audience=$WALRELAY_KAFKA_OAUTH_AUDIENCE"
}

write_config() {
  local dir="$1" port="$2" cport="$3"
  cat >"$dir/server.properties" <<EOF
# Written by scripts/kafka.sh: one KRaft node, broker and controller.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
controller.listener.names=CONTROLLER
$(write_listeners "$port" "$cport")
log.dirs=$dir/data
# One replica of everything, and small internal topics that come up fast.
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=${WALRELAY_KAFKA_TRANSACTION_REPLICATION:-1}
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# A node restarted after kill -9 registers again only once the controller
# has expired its old session: 3 s instead of 9 s.
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=750
# Tests write fixed timestamps (2026-11-29, 1970-01-01) as record times.
# Time-based retention deletes a segment once its newest record is older
# than log.retention.ms (7 days by default), so those records would vanish
# a week after the date was written, mid-test. Nothing here is kept that long.
log.retention.ms=-1
# walrelay creates its topics through the admin API, as the tests expect.
auto.create.topics.enable=false
EOF
}

# Writes the configuration (the ports may change, the data does not) and
# formats data/ on the first start, then becomes the broker.
run() {
  [ $# -ge 2 ] || usage
  local dir port cport
  dir="$(mkdir -p "$1" && cd "$1" && pwd)"
  port="$2"
  cport="${3:-$((port + 1))}"
  need_libs
  check_security
  write_config "$dir" "$port" "$cport"
  if [ ! -f "$dir/data/meta.properties" ]; then
    local id user scram=()
    if [ "$security" = sasl-scram ]; then
      for user in $users; do
        scram+=(--add-scram "SCRAM-SHA-512=[name=${user%%=*},password=${user#*=}]")
      done
    fi
    # 16 random bytes, base64url without padding. It may start with '-',
    # which argparse would read as an option: hence --cluster-id=ID.
    id="$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
    java "${jvm_flags[@]}" -cp "$libs/*" kafka.tools.StorageTool \
      format --cluster-id="$id" -c "$dir/server.properties" "${scram[@]}" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; exit 1; }
  fi
  exec java "${jvm_flags[@]}" -cp "$libs/*" kafka.Kafka "$dir/server.properties"
}

is_broker() {
  runs "$1" "kafka\.Kafka |kafka\.sh run "
}

started_count() {
  local n
  n="$(grep -c "Kafka Server started" "$1" 2>/dev/null)" || true
  echo "${n:-0}"
}

start() {
  [ $# -ge 2 ] || usage
  local dir="$1" begun before from pid
  need_libs
  mkdir -p "$dir"
  if [ -f "$dir/broker.pid" ] && is_broker "$(cat "$dir/broker.pid")"; then
    echo "kafka.sh: a broker already runs from $dir (pid $(cat "$dir/broker.pid"))" >&2
    exit 1
  fi
  before="$(started_count "$dir/broker.log")"
  from=1
  [ ! -f "$dir/broker.log" ] || from="$(( $(wc -l <"$dir/broker.log") + 1 ))"
  begun="$(date +%s%N)"
  bash "$0" run "$@" >>"$dir/broker.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/broker.pid"
  for _ in $(seq 1 1200); do
    if [ "$(started_count "$dir/broker.log")" -gt "$before" ]; then
      echo "Apache Kafka $version on 127.0.0.1:$2 (pid $pid), started in $(( ($(date +%s%N) - begun) / 1000000 )) ms"
      return
    fi
    if ! alive "$pid"; then
      echo "kafka.sh: the broker exited before it started" >&2
      show_log "$dir/broker.log" "$from" "ERROR|FATAL|Exception"
      rm -f "$dir/broker.pid"
      exit 1
    fi
    sleep 0.1
  done
  echo "kafka.sh: the broker did not start within 120 s" >&2
  show_log "$dir/broker.log" "$from" "ERROR|FATAL|Exception"
  stop "$dir"
  exit 1
}

stop() {
  [ $# -eq 1 ] || usage
  stop_pid_file "$1/broker.pid" "kafka\.Kafka |kafka\.sh run "
}

case "${1:-}" in
  fetch) fetch ;;
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
