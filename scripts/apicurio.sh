#!/usr/bin/env bash
# Apicurio Registry 3.3.3 (Apache-2.0), a schema registry with the
# Confluent-compatible API at /apis/ccompat/v7, for walrelay's Avro and
# JSON Schema tests; its ready Quarkus distribution from Maven Central
# (io.apicurio:apicurio-registry-app:3.3.3:tar.gz:all, checksum-checked by
# mvn), and Python confluent-kafka's AvroDeserializer, JSONDeserializer and
# ProtobufDeserializer, consumers registry users already run, to read what
# walrelay writes (with grpcio-tools' protoc, which compiles the registered
# .proto into the class a Protobuf consumer reads with).
#
#   scripts/apicurio.sh fetch            fetch and unpack it once; prints its folder
#   scripts/apicurio.sh python           install confluent-kafka[avro,json,protobuf,
#                                        schemaregistry] and grpcio-tools into a
#                                        venv once; prints its python
#   scripts/apicurio.sh converter        Debezium's worker (scripts/debezium.sh fetch)
#                                        with Apicurio's AvroConverter 2.6.13.Final
#                                        as a second plugin; prints the folder to
#                                        give scripts/debezium.sh as
#                                        WALRELAY_DEBEZIUM_HOME
#   scripts/apicurio.sh run PORT MPORT   the registry in the foreground (exec),
#                                        HTTP on 127.0.0.1:PORT, health on MPORT
#                                        (/health/ready); storage in memory (H2)
#
# With WALRELAY_APICURIO_TLS_CERT and WALRELAY_APICURIO_TLS_KEY (PEM files),
# PORT serves HTTPS only (plain HTTP on a port Quarkus picks); the health
# port MPORT stays plain HTTP. With WALRELAY_APICURIO_OIDC_JWKS (a JWKS URL)
# and WALRELAY_APICURIO_OIDC_ISSUER, every API call needs a bearer token
# that key set signed for that issuer, as behind Keycloak.
#
# It needs Java 21 or newer: WALRELAY_JAVA21 names a java, else Temurin 25
# at /usr/lib/jvm/temurin-25-jdk-amd64, else the java on PATH if it is 21+.
# Everything lives in ${WALRELAY_CACHE:-$HOME/.cache/walrelay}, never in
# the repository.
set -euo pipefail

version=3.3.3
confluent_kafka=2.16.2
grpcio_tools=1.85.4
cache="${WALRELAY_CACHE:-$HOME/.cache/walrelay}"
home="$cache/apicurio-$version"
venv="$cache/registry-oracle-confluent-kafka-$confluent_kafka-protoc-$grpcio_tools"

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
  exit 2
}

fetch() {
  if [ -f "$home/quarkus-app/quarkus-run.jar" ]; then
    echo "$home"
    return
  fi
  command -v mvn >/dev/null || { echo "apicurio.sh: mvn is missing (apt-get install maven)" >&2; exit 1; }
  mkdir -p "$home"
  local tarball="$home/dl/apicurio-registry-app-$version-all.tar.gz"
  if [ ! -f "$tarball" ]; then
    echo "fetching Apicurio Registry $version into $home" >&2
    mvn -B -q dependency:copy \
      -Dartifact="io.apicurio:apicurio-registry-app:$version:tar.gz:all" \
      -DoutputDirectory="$home/dl" >&2
  fi
  local tmp="$home/unpack.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  tar -xzf "$tarball" -C "$tmp"
  local app
  app="$(dirname "$(find "$tmp" -name quarkus-run.jar | head -n 1)")"
  [ -f "$app/quarkus-run.jar" ] || { echo "apicurio.sh: no quarkus-run.jar in $tarball" >&2; exit 1; }
  rm -rf "$home/quarkus-app"
  mv "$app" "$home/quarkus-app"
  rm -rf "$tmp"
  echo "$home"
}

python() {
  if [ ! -f "$venv/.installed" ]; then
    echo "installing confluent-kafka[avro,json,protobuf,schemaregistry]==$confluent_kafka and grpcio-tools==$grpcio_tools into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$cache"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
      "confluent-kafka[avro,json,protobuf,schemaregistry]==$confluent_kafka" \
      "grpcio-tools==$grpcio_tools" >&2
    touch "$venv/.installed"
  fi
  echo "$venv/bin/python"
}

# Debezium's libs and connector, linked, and the converter's jars beside
# them in plugins/apicurio-converter; the worker discovers plugins by their
# ServiceLoader manifests, which the converter's jar lacks, so a small jar
# adds one.
converter() {
  local base out plugin
  base="$("$(dirname "$0")/debezium.sh" fetch)"
  out="$cache/debezium-with-apicurio-converter-2.6.13.Final"
  if [ -f "$out/.complete" ]; then
    echo "$out"
    return
  fi
  rm -rf "$out"
  mkdir -p "$out/plugins"
  ln -s "$base/libs" "$out/libs"
  ln -s "$base/plugins/debezium-connector-postgres" "$out/plugins/debezium-connector-postgres"
  plugin="$out/plugins/apicurio-converter"
  echo "fetching Apicurio's converter into $plugin" >&2
  mvn -B -q -f "$(dirname "$0")/apicurio/converter-pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$plugin" >&2
  local manifest="$out/manifest"
  mkdir -p "$manifest/META-INF/services"
  echo io.apicurio.registry.utils.converter.AvroConverter \
    >"$manifest/META-INF/services/org.apache.kafka.connect.storage.Converter"
  (cd "$manifest" && jar cf "$plugin/walrelay-apicurio-converter-services.jar" META-INF)
  rm -rf "$manifest"
  touch "$out/.complete"
  echo "$out"
}

java21() {
  local candidate
  for candidate in "${WALRELAY_JAVA21:-}" /usr/lib/jvm/temurin-25-jdk-amd64/bin/java "$(command -v java || true)"; do
    [ -n "$candidate" ] && [ -x "$candidate" ] || continue
    local major
    major="$("$candidate" -XshowSettings:properties -version 2>&1 | sed -n 's/.*java.specification.version = \([0-9]*\).*/\1/p')"
    if [ "${major:-0}" -ge 21 ]; then
      echo "$candidate"
      return
    fi
  done
  echo "apicurio.sh: no Java 21 or newer (set WALRELAY_JAVA21)" >&2
  exit 1
}

run() {
  local port="$1" mport="$2"
  [ -f "$home/quarkus-app/quarkus-run.jar" ] || { echo "apicurio.sh: run scripts/apicurio.sh fetch first" >&2; exit 1; }
  local listen=(-Dquarkus.http.port="$port")
  if [ -n "${WALRELAY_APICURIO_TLS_CERT:-}" ]; then
    listen=(-Dquarkus.http.port=0 -Dquarkus.http.ssl-port="$port"
      -Dquarkus.http.ssl.certificate.files="$WALRELAY_APICURIO_TLS_CERT"
      -Dquarkus.http.ssl.certificate.key-files="$WALRELAY_APICURIO_TLS_KEY")
  fi
  # Every API call needs a bearer token its JWKS signed, as behind Keycloak
  # (Quarkus OIDC as a service, without discovery).
  if [ -n "${WALRELAY_APICURIO_OIDC_JWKS:-}" ]; then
    listen+=(-Dquarkus.oidc.tenant-enabled=true -Dquarkus.oidc.application-type=service
      -Dquarkus.oidc.auth-server-url="${WALRELAY_APICURIO_OIDC_JWKS%/*}"
      -Dquarkus.oidc.discovery-enabled=false
      -Dquarkus.oidc.jwks-path="$WALRELAY_APICURIO_OIDC_JWKS"
      -Dquarkus.oidc.token.issuer="${WALRELAY_APICURIO_OIDC_ISSUER:-any}")
  fi
  # A small JVM beside Postgres and a broker on 2 cores.
  exec "$(java21)" -Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dquarkus.http.host=127.0.0.1 "${listen[@]}" \
    -Dquarkus.management.port="$mport" -Dquarkus.management.host=127.0.0.1 \
    -Dquarkus.log.level=WARN \
    -jar "$home/quarkus-app/quarkus-run.jar"
}

case "${1:-}" in
  fetch) fetch ;;
  python) python ;;
  converter) converter ;;
  run) [ $# -eq 3 ] || usage; run "$2" "$3" ;;
  *) usage ;;
esac
