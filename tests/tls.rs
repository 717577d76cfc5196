//! TLS to Postgres with every sslmode, against a cluster that accepts TCP
//! connections only over TLS, with a CA and certificate the test makes.

mod support;

use std::time::Duration;

use support::{Broker, Postgres, Relay};

const WAIT: Duration = Duration::from_secs(60);

fn url(pg: &Postgres, host: &str, params: &str) -> String {
    format!("postgres://postgres@{host}:{}/postgres?{params}", pg.port)
}

/// Starts walrelay with `pg_url`, relays one event, and checks that both of
/// its connections (SQL and walsender) use TLS.
async fn relays_over_tls(pg: &Postgres, broker: &Broker, pg_url: &str, event_type: &str) {
    relays_over_tls_with_env(pg, broker, pg_url, event_type, &[]).await
}

async fn relays_over_tls_with_env(
    pg: &Postgres,
    broker: &Broker,
    pg_url: &str,
    event_type: &str,
    env: &[(&str, &str)],
) {
    let relay = Relay::start_raw_with_env(pg_url, &broker.brokers(), &[], env);
    relay.wait_ready(WAIT);
    let client = pg.client().await;
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'order', 'o-1', $1, '{}')",
            &[&event_type],
        )
        .await
        .unwrap();
    let reader = broker.consumer();
    reader.subscribe(&[&format!("outbox.event.{event_type}")]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "log:\n{}", relay.log());
    let walsender_tls: bool = client
        .query_one(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.backend_type = 'walsender'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(walsender_tls, "the replication connection uses TLS");
    drop(relay);
    // Let the walsender go before the next relay takes the slot.
    tokio::time::sleep(Duration::from_millis(500)).await;
}

fn fails_with(pg_url: &str, expected: &str) {
    fails_with_env(pg_url, expected, &[])
}

fn fails_with_env(pg_url: &str, expected: &str, env: &[(&str, &str)]) {
    let mut relay = Relay::start_raw_with_env(pg_url, "127.0.0.1:9", &[], env);
    // A certificate problem is permanent: no waiting out --startup-timeout.
    let status = relay
        .wait(Duration::from_secs(10))
        .expect("walrelay stops at once");
    let log = relay.log();
    assert!(!status.success());
    assert!(log.contains(expected), "expected {expected:?} in:\n{log}");
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sslmode_behaves_as_in_libpq() {
    let (pg, ca) = Postgres::start_with_tls();
    let broker = Broker::start();
    pg.client_with_outbox().await;
    let ca = ca.display().to_string();

    relays_over_tls(
        &pg,
        &broker,
        &url(
            &pg,
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        "VerifyFull",
    )
    .await;
    relays_over_tls(
        &pg,
        &broker,
        &url(
            &pg,
            "127.0.0.1",
            &format!("sslmode=verify-ca&sslrootcert={ca}"),
        ),
        "VerifyCa",
    )
    .await;
    relays_over_tls(
        &pg,
        &broker,
        &url(&pg, "127.0.0.1", "sslmode=require"),
        "Require",
    )
    .await;
    relays_over_tls(
        &pg,
        &broker,
        &url(&pg, "127.0.0.1", "sslmode=prefer"),
        "Prefer",
    )
    .await;

    // The certificate names localhost, not 127.0.0.1.
    fails_with(
        &url(
            &pg,
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        "TLS handshake",
    );
    // A CA that did not sign the server's certificate.
    let other = pg.other_ca().display().to_string();
    fails_with(
        &url(
            &pg,
            "localhost",
            &format!("sslmode=verify-ca&sslrootcert={other}"),
        ),
        "TLS handshake",
    );
    // The server accepts no plain connection.
    fails_with(&url(&pg, "127.0.0.1", "sslmode=disable"), "no encryption");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_root_certificate_is_the_only_one_trusted() {
    let (pg, ca) = Postgres::start_with_tls();
    let broker = Broker::start();
    pg.client_with_outbox().await;
    let ca = ca.display().to_string();
    let other = pg.other_ca().display().to_string();
    // OpenSSL's default trust store (the system's) made to hold the CA
    // that signed the server's certificate.
    let system_trusts_server = [("SSL_CERT_FILE", ca.as_str())];

    // Without sslrootcert, the system's store is what verify-full checks
    // against (verify-ca without one is refused at start).
    relays_over_tls_with_env(
        &pg,
        &broker,
        &url(&pg, "localhost", "sslmode=verify-full"),
        "SystemStore",
        &system_trusts_server,
    )
    .await;
    // libpq 16's name for the same: verify-full against the system's store.
    relays_over_tls_with_env(
        &pg,
        &broker,
        &url(&pg, "localhost", "sslrootcert=system"),
        "SystemRoots",
        &system_trusts_server,
    )
    .await;
    // With a file, as in libpq, only that file is trusted: the system's store
    // would otherwise let any certificate it trusts pass verify-ca.
    fails_with_env(
        &url(
            &pg,
            "localhost",
            &format!("sslmode=verify-ca&sslrootcert={other}"),
        ),
        "TLS handshake",
        &system_trusts_server,
    );
}
