//! walrelay on an Apache Kafka broker that takes Kerberos (SASL/GSSAPI)
//! logins, in a realm of the test's own: an MIT KDC started here
//! (tests/support/kerberos.rs) with principals for the broker and for
//! walrelay, and their keytabs. With its keytab walrelay relays events
//! (librdkafka runs kinit with it, into walrelay's own ticket cache); a
//! keytab without its principal's key, or a service name that is not the
//! broker's, stops walrelay with the properties to fix; `walrelay check`
//! says the same. Cyrus SASL's plugins, which only Kerberos uses, are
//! loaded by a walrelay that logs in with Kerberos and by no other.
//!
//! One KDC and one broker serve every test (a JVM per test would cost
//! seconds): each test has a principal, a ticket cache and topics of its
//! own. tansu has no SASL. Needs the `gssapi` feature (on by default).

#![cfg(feature = "gssapi")]

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::kerberos::{Kdc, REALM};
use support::outbox::events;
use support::{check_entry as entry, check_json_with_env, Broker, Postgres, Relay};

/// Where Debian and most distributions keep Cyrus SASL's plugins
/// (`/usr/lib/<triplet>/sasl2/`, `/usr/lib64/sasl2/`).
const CYRUS_PLUGINS: &str = "/sasl2/";

const WAIT: Duration = Duration::from_secs(60);

/// The realm and the broker that logs its clients in there.
fn realm() -> (&'static Kdc, &'static Broker) {
    let kdc = Kdc::shared();
    (kdc, Broker::shared_apache_kerberos(kdc))
}

/// The `-X` flags that log in as `principal` with `keytab`.
fn kerberos_flags(principal: &str, keytab: &Path) -> Vec<String> {
    [
        "security.protocol=SASL_PLAINTEXT".to_string(),
        "sasl.mechanism=GSSAPI".to_string(),
        "sasl.kerberos.service.name=kafka".to_string(),
        format!("sasl.kerberos.principal={principal}"),
        format!("sasl.kerberos.keytab={}", keytab.display()),
    ]
    .into_iter()
    .flat_map(|property| ["-X".to_string(), property])
    .collect()
}

/// A walrelay logging in as `principal` with `keytab`, `env` naming its
/// krb5.conf and ticket cache, its topics named `{prefix}${routedByValue}`,
/// with `extra` flags.
fn relay(
    pg: &Postgres,
    principal: &str,
    keytab: &Path,
    env: Vec<(String, String)>,
    prefix: &str,
    extra: &[&str],
) -> Relay {
    let (_, broker) = realm();
    let mut flags = kerberos_flags(principal, keytab);
    flags.extend([
        "--topic-replacement".into(),
        format!("{prefix}${{routedByValue}}"),
    ]);
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Relay::start_with_env(pg, broker, &flags, env)
}

/// One event of type Placed with id `id`.
async fn placed(client: &tokio_postgres::Client, id: &str) {
    events("Placed", 1)
        .id(id)
        .aggregate("order-1")
        .payload(r#"{"n": 1}"#)
        .insert(client)
        .await;
}

fn assert_mentions(log: &str, words: &[&str]) {
    for word in words {
        assert!(log.contains(word), "the log should say {word:?}:\n{log}");
    }
}

/// A walrelay logging in as `principal` with `keytab`, `env` and `extra`,
/// run until it stops with a failure: its log.
async fn halted(
    principal: &str,
    keytab: &Path,
    env: Vec<(String, String)>,
    extra: &[&str],
) -> String {
    let pg = Postgres::start();
    let _client = pg.client_with_outbox().await;
    let mut relay = relay(&pg, principal, keytab, env, "krb.halted.", extra);
    relay.wait_for_failure(WAIT)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_logs_in_with_its_keytab_and_relays_events_over_kerberos() {
    let (kdc, broker) = realm();
    let keytab = kdc.add_principal("walrelay");
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let principal = format!("walrelay@{REALM}");
    let env = kdc.client_env("walrelay");
    let relay = relay(&pg, &principal, &keytab, env, "krb.ok.", &[]);
    relay.wait_ready(WAIT);

    let id = "00000000-0000-0000-0000-00000000b001";
    placed(&client, id).await;
    let reader = broker.consumer();
    reader.subscribe(&["krb.ok.Placed"]);
    let got = reader.read(1, WAIT);
    assert_eq!(got.len(), 1, "{}", relay.log());
    assert_eq!(got[0].key.as_deref(), Some("order-1"));
    assert_eq!(got[0].header("id"), Some(id));
    assert_eq!(got[0].value.as_deref(), Some(r#"{"n": 1}"#));
    // The realm issued walrelay a ticket for the broker, into walrelay's
    // own cache (KRB5CCNAME), where kinit put its ticket-granting ticket.
    assert_mentions(
        &kdc.log(),
        &[&format!("{principal} for kafka/localhost@{REALM}")],
    );
    assert!(kdc.cache("walrelay").exists(), "no ticket cache");
    let gssapi = mapped(&relay, CYRUS_PLUGINS);
    assert!(
        gssapi.iter().any(|path| path.contains("gssapi")),
        "Cyrus's GSSAPI plugin is not loaded: {gssapi:?}"
    );
}

/// The files `relay`'s process maps whose path contains `part`.
fn mapped(relay: &Relay, part: &str) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", relay.pid())).unwrap();
    let mut paths: Vec<String> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| path.contains(part))
        .map(str::to_string)
        .collect();
    paths.dedup();
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walrelay_that_does_not_log_in_with_kerberos_loads_no_cyrus_plugin_nor_kerberos() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);
    let id = "00000000-0000-0000-0000-00000000b010";
    placed(&client, id).await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Placed"]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "{}", relay.log());
    for part in [CYRUS_PLUGINS, "libkrb5", "libgssapi", "libdb-"] {
        let paths = mapped(&relay, part);
        assert!(paths.is_empty(), "{part}: {paths:?}");
    }
    // The library Cyrus lives in is linked all the same.
    assert!(!mapped(&relay, "libsasl2").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keytab_without_walrelays_key_stops_it_naming_the_keytab_and_principal_to_fix() {
    let (kdc, _) = realm();
    // A keytab that exists and is readable, but holds another principal.
    let other = kdc.add_principal("someone-else");
    let principal = format!("wrongtab@{REALM}");
    kdc.add_principal("wrongtab");
    let log = halted(&principal, &other, kdc.client_env("wrongtab"), &[]).await;
    assert_mentions(
        &log,
        &[
            "Kafka refused walrelay's login",
            // kinit's own words, and librdkafka's about the command it ran.
            &format!("Keytab contains no suitable keys for {principal}"),
            "before it, Kerberos ticket refresh failed: kinit",
            "-X sasl.kerberos.principal",
            "-X sasl.kerberos.keytab",
            "klist -kt",
            "KRB5_CONFIG",
        ],
    );
    assert!(!log.contains("sasl.password"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_name_that_is_not_the_brokers_stops_walrelay_naming_the_property() {
    let (kdc, _) = realm();
    let keytab = kdc.add_principal("wrongservice");
    let principal = format!("wrongservice@{REALM}");
    // kinit succeeds; the ticket for kafak/localhost is what the realm lacks.
    let log = halted(
        &principal,
        &keytab,
        kdc.client_env("wrongservice"),
        &["-X", "sasl.kerberos.service.name=kafak"],
    )
    .await;
    assert_mentions(
        &log,
        &[
            "Kafka refused walrelay's login",
            &format!("kafak/localhost@{REALM} not found in Kerberos database"),
            "-X sasl.kerberos.service.name",
        ],
    );
    assert!(!log.contains("Kerberos ticket refresh failed"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kdc_that_does_not_answer_stops_walrelay_naming_the_krb5_conf_to_check() {
    let (kdc, _) = realm();
    let keytab = kdc.add_principal("nokdc");
    let principal = format!("nokdc@{REALM}");
    let env = kdc.client_env_without_kdc("nokdc");
    let log = halted(&principal, &keytab, env, &[]).await;
    assert_mentions(
        &log,
        &[
            "Kafka refused walrelay's login",
            // kinit's words.
            &format!("Cannot contact any KDC for realm '{REALM}'"),
            "before it, Kerberos ticket refresh failed: kinit",
            "KRB5_CONFIG",
            "names the realm's KDC and that walrelay reaches it",
        ],
    );
}

/// `walrelay check --json` logging in as `principal` with `keytab`:
/// (success, report, stdout and stderr).
fn check(pg: &Postgres, principal: &str, keytab: &Path, cache: &str) -> (bool, Value, String) {
    let (kdc, broker) = realm();
    let mut args = vec![
        "--pg-url".to_string(),
        pg.url(),
        "--kafka-brokers".into(),
        broker.brokers(),
        "--topic-replacement".into(),
        "krb.check.${routedByValue}".into(),
    ];
    args.extend(kerberos_flags(principal, keytab));
    check_json_with_env(&args, &kdc.client_env(cache))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_check_passes_with_a_good_keytab_and_names_the_kerberos_properties_for_a_wrong_one(
) {
    let (kdc, _) = realm();
    let keytab = kdc.add_principal("checker");
    let principal = format!("checker@{REALM}");
    let pg = Postgres::start();
    let _client = pg.client_with_outbox().await;

    let (_, doc, output) = check(&pg, &principal, &keytab, "checker");
    for name in [
        "kafka.brokers",
        "kafka.create_topics",
        "kafka.idempotent_write",
    ] {
        let entry = entry(&doc, name);
        assert_eq!(entry["status"], "pass", "{name}: {entry:#}\n{output}");
    }

    let other = kdc.add_principal("checker-other");
    let (ok, doc, output) = check(&pg, &principal, &other, "checker-wrong");
    assert!(!ok, "{doc:#}");
    let brokers = entry(&doc, "kafka.brokers");
    assert_eq!(brokers["status"], "fail", "{brokers:#}\n{output}");
    let text = format!("{} {}", brokers["detail"], brokers["fix"]);
    assert_mentions(
        &text,
        &[
            "refused walrelay's login",
            "Kerberos ticket refresh failed",
            "-X sasl.kerberos.principal",
            "-X sasl.kerberos.keytab",
        ],
    );
}
