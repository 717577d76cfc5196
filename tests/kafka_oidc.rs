//! walrelay logging in to Apache Kafka with SASL/OAUTHBEARER and OIDC
//! (`-X sasl.oauthbearer.method=oidc`): librdkafka asks a token endpoint
//! for a token with the client-credentials grant, and the broker
//! (OAuthBearerValidatorCallbackHandler) checks its signature against the
//! provider's JWKS, its issuer and its audience. The provider is the
//! test's own (support/oidc.rs): it records what arrived and signs RS256
//! tokens with a key it made. A good client relays; a wrong client secret
//! stops walrelay with the settings to check, and `walrelay check` says the
//! same; neither the secret nor a token ever shows.
//!
//! One broker and one provider serve every test (a JVM per test would cost
//! seconds); each test asks for a scope of its own, by which it finds its
//! requests. tansu has no SASL.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use support::oidc::{IdentityProvider, TlsEndpoint, AUDIENCE, ISSUER};
use support::outbox::events;
use support::pg::slot_still_holds;
use support::{check_entry, check_json, Broker, Postgres, Relay};

const WAIT: Duration = Duration::from_secs(60);
const CLIENT_ID: &str = "walrelay-relay";
/// Distinct enough that any trace of it in an output is a leak.
const CLIENT_SECRET: &str = "oidc-client-secret-Vq7r";
const WRONG_SECRET: &str = "oidc-wrong-secret-Kx4p";

fn provider() -> &'static IdentityProvider {
    static PROVIDER: OnceLock<IdentityProvider> = OnceLock::new();
    PROVIDER.get_or_init(|| IdentityProvider::start(CLIENT_ID, CLIENT_SECRET))
}

/// The provider's token endpoint over HTTPS.
fn tls_endpoint() -> &'static TlsEndpoint {
    static ENDPOINT: OnceLock<TlsEndpoint> = OnceLock::new();
    ENDPOINT.get_or_init(|| provider().start_tls())
}

fn broker() -> &'static Broker {
    Broker::shared_apache_oauthbearer(&provider().jwks_url(), ISSUER, AUDIENCE)
}

/// A walrelay logging in with client secret `secret` and `scope`, its
/// topics named `{prefix}${routedByValue}`.
fn relay(pg: &Postgres, secret: &str, scope: &str, prefix: &str) -> Relay {
    let mut flags = provider().login_flags(secret, scope);
    flags.extend([
        "--topic-replacement".into(),
        format!("{prefix}${{routedByValue}}"),
    ]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Relay::start_with(pg, broker(), &flags)
}

/// A walrelay asking the HTTPS token endpoint with `scope`, with `extra`
/// flags and `env`.
fn relay_over_https(
    pg: &Postgres,
    scope: &str,
    prefix: &str,
    extra: &[String],
    env: Vec<(String, String)>,
) -> Relay {
    let url = tls_endpoint().token_url();
    let mut flags = provider().login_flags_at(&url, CLIENT_SECRET, scope);
    flags.extend([
        "--topic-replacement".into(),
        format!("{prefix}${{routedByValue}}"),
    ]);
    flags.extend_from_slice(extra);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // libcurl would take a proxy from the environment; none here.
    let mut env = env;
    env.extend(["NO_PROXY", "no_proxy"].map(|k| (k.to_string(), "*".to_string())));
    Relay::start_with_env(pg, broker(), &flags, env)
}

/// A walrelay on a fresh Postgres that logs in over HTTPS with `scope`,
/// `extra` flags and `env`: asserts that event `id` reaches
/// `{prefix}Placed`, and that a token was asked for with `scope`.
async fn assert_https_login_relays(
    scope: &str,
    prefix: &str,
    id: &str,
    extra: &[String],
    env: Vec<(String, String)>,
) {
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let relay = relay_over_https(&pg, scope, prefix, extra, env);
    relay.wait_ready(WAIT);
    events("Placed", 1).id(id).insert(&client).await;
    let reader = broker().consumer();
    let topic = format!("{prefix}Placed");
    reader.subscribe(&[topic.as_str()]);
    let got = reader.read(1, WAIT);
    assert_eq!(got.len(), 1, "{}", relay.log());
    assert_eq!(got[0].header("id"), Some(id));
    assert!(
        !requests_for(scope).is_empty(),
        "no token request with scope {scope:?}"
    );
    assert_no_secret(&relay.log());
}

// The OIDC login's HTTPS goes through libcurl, built into walrelay on the
// system's OpenSSL (rdkafka's curl-static): these three show that it
// checks the token endpoint's certificate against -X https.ca.location,
// else the system's CA store, and stops on one no trusted CA signed.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_token_endpoint_signed_by_the_ca_in_https_ca_location_gives_walrelay_its_token() {
    let ca = format!("https.ca.location={}", tls_endpoint().ca_pem.display());
    assert_https_login_relays(
        "kafka.produce https ca-location",
        "oidc.https.",
        "00000000-0000-0000-0000-00000000c004",
        &["-X".into(), ca],
        vec![],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_token_endpoint_signed_by_a_ca_of_the_systems_store_gives_walrelay_its_token() {
    // OpenSSL's default store, which a public CA's certificate is checked
    // against, is the file SSL_CERT_FILE names when it is set.
    let store = tls_endpoint().ca_pem.display().to_string();
    assert_https_login_relays(
        "kafka.produce https system store",
        "oidc.store.",
        "00000000-0000-0000-0000-00000000c005",
        &[],
        vec![("SSL_CERT_FILE".to_string(), store)],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_token_endpoint_no_trusted_ca_signed_stops_walrelay_with_the_fix() {
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let id = "00000000-0000-0000-0000-00000000c003";
    // A slot made by a first start that logged in over plain HTTP, with an
    // event waiting in it.
    let mut first = relay(
        &pg,
        CLIENT_SECRET,
        "kafka.produce untrusted first",
        "oidc.untrusted.",
    );
    first.wait_ready(WAIT);
    assert!(first.terminate(WAIT).success(), "{}", first.log());
    events("Placed", 1).id(id).insert(&client).await;
    let scope = "kafka.produce https untrusted";
    let mut relay = relay_over_https(&pg, scope, "oidc.untrusted.", &[], vec![]);

    let log = relay.wait_for_failure(WAIT);
    for words in [
        "could not get an OAUTHBEARER token",
        // OpenSSL's reason: the handshake happened, and the certificate
        // failed it (not a refused connection or a proxy).
        "unable to get local issuer certificate",
        "-X https.ca.location",
    ] {
        assert!(log.contains(words), "the log should say {words:?}:\n{log}");
    }
    // The handshake failed: no request reached the endpoint.
    assert!(requests_for(scope).is_empty());
    assert!(slot_still_holds(&client, "walrelay", id).await);
}

/// Asserts that no secret of the provider's client and no token it issued
/// shows in `output`.
fn assert_no_secret(output: &str) {
    for secret in [CLIENT_SECRET, WRONG_SECRET] {
        assert!(!output.contains(secret), "the secret leaked:\n{output}");
    }
    for token in provider().issued() {
        // A token's signature is unique to it.
        let signature = token.rsplit('.').next().unwrap();
        assert!(!output.contains(signature), "a token leaked:\n{output}");
    }
}

/// The requests that asked for `scope`.
fn requests_for(scope: &str) -> Vec<support::oidc::TokenRequest> {
    provider()
        .requests()
        .into_iter()
        .filter(|r| r.form.get("scope").map(String::as_str) == Some(scope))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oidc_login_relays_events_with_a_token_the_broker_checked_against_the_jwks() {
    let broker = broker();
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let scope = "kafka.produce relay";
    let relay = relay(&pg, CLIENT_SECRET, scope, "oidc.ok.");
    relay.wait_ready(WAIT);

    let id = "00000000-0000-0000-0000-00000000c001";
    events("Placed", 1)
        .id(id)
        .aggregate("order-1")
        .payload(r#"{"n": 1}"#)
        .insert(&client)
        .await;
    let reader = broker.consumer();
    reader.subscribe(&["oidc.ok.Placed"]);
    let got = reader.read(1, WAIT);
    assert_eq!(got.len(), 1, "{}", relay.log());
    assert_eq!(got[0].header("id"), Some(id));
    assert_eq!(got[0].key.as_deref(), Some("order-1"));

    // What reached the token endpoint: the client-credentials grant with
    // the configured id, secret and scope.
    let requests = requests_for(scope);
    assert!(
        !requests.is_empty(),
        "no token request with scope {scope:?}"
    );
    for request in &requests {
        assert_eq!(
            request.credentials,
            Some((CLIENT_ID.to_string(), CLIENT_SECRET.to_string()))
        );
        assert_eq!(
            request.form.get("grant_type").map(String::as_str),
            Some("client_credentials")
        );
    }
    let metrics = relay.http_get("/metrics").expect("/metrics answers").1;
    assert_no_secret(&format!("{}\n{metrics}", relay.log()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_secret_the_token_endpoint_refuses_stops_walrelay_with_the_settings_to_check() {
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    // A walrelay that ran with the right secret made its slot; the secret
    // is then rotated wrong, with an event waiting in the slot.
    let mut first = relay(&pg, CLIENT_SECRET, "kafka.produce before", "oidc.wrong.");
    first.wait_ready(WAIT);
    assert!(first.terminate(WAIT).success(), "{}", first.log());
    let id = "00000000-0000-0000-0000-00000000c002";
    events("Placed", 1).id(id).insert(&client).await;
    let scope = "kafka.produce wrong-secret";
    let mut rotated = relay(&pg, WRONG_SECRET, scope, "oidc.wrong.");

    let log = rotated.wait_for_failure(WAIT);
    for words in [
        "could not get an OAUTHBEARER token",
        // The provider's own answer (RFC 6749 5.2).
        "invalid_client",
        "-X sasl.oauthbearer.token.endpoint.url",
        "-X sasl.oauthbearer.client.id",
        "-X sasl.oauthbearer.client.secret",
    ] {
        assert!(log.contains(words), "the log should say {words:?}:\n{log}");
    }
    assert_no_secret(&log);
    let asked = requests_for(scope);
    assert!(!asked.is_empty(), "no token request with scope {scope:?}");
    assert_eq!(
        asked[0].credentials,
        Some((CLIENT_ID.to_string(), WRONG_SECRET.to_string()))
    );
    assert!(slot_still_holds(&client, "walrelay", id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_another_audience_is_refused_by_the_broker_and_stops_walrelay_with_the_fix() {
    let pg = Postgres::start();
    let _client = pg.client_with_outbox().await;
    // A good client, but a token for another resource: the provider grants
    // it, the broker (expecting its own audience) does not take it.
    let mut relay = relay(
        &pg,
        CLIENT_SECRET,
        "api://another-service/.default",
        "oidc.audience.",
    );
    let log = relay.wait_for_failure(WAIT);
    for words in [
        "Kafka refused walrelay's login",
        "OAUTHBEARER token",
        "invalid_token",
        "-X sasl.oauthbearer.scope",
        "sasl.oauthbearer.expected.audience",
    ] {
        assert!(log.contains(words), "the log should say {words:?}:\n{log}");
    }
    assert_no_secret(&log);
}

/// `walrelay check --json` logging in with `secret` and `scope`: (success,
/// report, stdout and stderr).
fn check(pg: &Postgres, secret: &str, scope: &str, prefix: &str) -> (bool, Value, String) {
    let mut args: Vec<String> = vec![
        "--pg-url".into(),
        pg.url(),
        "--kafka-brokers".into(),
        broker().brokers(),
        "--topic-replacement".into(),
        format!("{prefix}${{routedByValue}}"),
    ];
    args.extend(provider().login_flags(secret, scope));
    check_json(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_check_reports_a_token_endpoint_that_refuses_the_client_with_the_fix() {
    let pg = Postgres::start();
    let _client = pg.client_with_outbox().await;
    let (ok, doc, output) = check(&pg, WRONG_SECRET, "check wrong-secret", "oidc.check.");
    assert!(!ok, "{doc:#}");
    let brokers = check_entry(&doc, "kafka.brokers");
    assert_eq!(brokers["status"], "fail", "{brokers:#}");
    let detail = brokers["detail"].as_str().unwrap();
    let fix = brokers["fix"].as_str().unwrap();
    assert!(detail.contains(&provider().token_url()), "{detail}");
    assert!(detail.contains("invalid_client"), "{detail}");
    for property in [
        "-X sasl.oauthbearer.token.endpoint.url",
        "-X sasl.oauthbearer.client.id",
        "-X sasl.oauthbearer.client.secret",
    ] {
        assert!(fix.contains(property), "{fix}");
    }
    assert_no_secret(&output);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_check_passes_its_kafka_checks_with_an_oidc_login() {
    let pg = Postgres::start();
    let _client = pg.client_with_outbox().await;
    let (_, doc, output) = check(&pg, CLIENT_SECRET, "check good", "oidc.checked.");
    for name in [
        "kafka.brokers",
        "kafka.describe_topics",
        "kafka.create_topics",
        "kafka.idempotent_write",
    ] {
        let entry = check_entry(&doc, name);
        assert_eq!(entry["status"], "pass", "{name}: {entry:#}");
    }
    assert_no_secret(&output);
}
