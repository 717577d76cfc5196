# Builds walrelay and runs it as a non-root user.
# The toolchain link/hot-functions.txt was made with: its Rust names carry
# hashes that another rustc gives other values (build.rs, scripts/hot-functions.sh).
FROM rust:1.95.0-bookworm AS build
# libsasl2-dev: Kerberos (the default `gssapi` feature). OAUTHBEARER OIDC
# (the default `oidc` feature) compiles libcurl into the binary, but
# librdkafka's configure checks for it by linking -lcurl, and turns OIDC off
# without it: libcurl4-openssl-dev is needed to build, not to run.
RUN apt-get update && apt-get install -y --no-install-recommends cmake libcurl4-openssl-dev libsasl2-dev libssl-dev pkg-config zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY .cargo ./.cargo
COPY link ./link
COPY src ./src
COPY examples ./examples
COPY benches ./benches
RUN cargo build --release --locked --bin walrelay

FROM debian:bookworm-slim
# libsasl2-2: walrelay links it (the gssapi feature). Kerberos to Kafka also
# needs Cyrus SASL's GSSAPI mechanism and kinit, which librdkafka runs.
# ca-certificates: the CA store HTTPS to an OIDC token endpoint is checked
# against, unless -X https.ca.location names another.
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    ca-certificates libssl3 zlib1g libsasl2-2 libsasl2-modules-gssapi-mit krb5-user \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home walrelay
COPY --from=build /src/target/release/walrelay /usr/local/bin/walrelay
USER 10001
# The metrics endpoint binds to 127.0.0.1 unless told otherwise; in a
# container it must listen on all interfaces to be scraped.
ENV WALRELAY_METRICS_ADDR=0.0.0.0:9187
EXPOSE 9187
ENTRYPOINT ["/usr/local/bin/walrelay"]
CMD ["run"]
