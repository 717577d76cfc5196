#!/usr/bin/env bash
# Runs walrelay's whole test suite against a real Postgres and real Kafka
# brokers (tansu in memory; Apache Kafka for tests/apache_kafka.rs, for
# every broker that must survive kill -9 and, with Debezium in Kafka
# Connect, for tests/debezium_oracle.rs), installing them first when they
# are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

# The compose file must stay valid: Debian's docker-compose parses and
# validates it against the Compose schema without a Docker engine.
docker-compose -f docker-compose.yml config -q
# The Kubernetes manifests against the Kubernetes and prometheus-operator schemas.
scripts/validate-kubernetes.sh

cargo fmt --all -- --check
# Every feature is on by default, so tests/aws.rs, kafka_kerberos.rs and
# kafka_oidc.rs run; the demo's build has none of them (scripts/demo.sh).
cargo clippy --all-targets -- -D warnings
cargo clippy --no-default-features --bin walrelay -- -D warnings
# Each integration test starts its own Postgres and broker; two at a time suit 2 cores.
# On Apache Kafka whatever the broker setting: tests/apache_kafka.rs (the core
# guarantees), tests/kafka_security.rs (SASL/SCRAM and ACLs on one secure
# broker), tests/kafka_oidc.rs (OAUTHBEARER with OIDC, a token endpoint of
# its own), tests/exactly_once.rs (--delivery exactly-once; tansu has no isolating
# transactions) and tests/debezium_oracle.rs (walrelay beside Debezium in
# Kafka Connect, record for record; about 40 s); the rest on tansu.
cargo test -- --test-threads="${WALRELAY_TEST_THREADS:-2}"
# Where the broker itself decides (size limits, which topics exist), and
# the resume after Postgres crashes (what Kafka already holds is not sent
# again), the same tests on Apache Kafka too (docs/testing.md).
WALRELAY_TEST_BROKER=apache cargo test --test poison --test topics --test postgres_crashes -- --test-threads="${WALRELAY_TEST_THREADS:-2}"
# The TypeScript writer examples: tsc against the real packages, and the
# Drizzle one end to end (node_modules cached in examples/writers/).
scripts/test-writers.sh
