//! walrelay on AWS, without AWS. Its tokens against AWS's own builders, byte
//! for byte, for the same inputs, credentials and clock: botocore's
//! `generate_db_auth_token` for RDS/Aurora IAM, `aws-msk-iam-sasl-signer-python`
//! for MSK IAM (tests/fixtures/aws_oracle.py, from PyPI through
//! scripts/aws-oracle.sh). And `--pg-auth rds-iam` end to end, through a
//! stand-in RDS endpoint (tests/support/aws.rs) that checks each login's
//! token with botocore before a real Postgres takes the session.
#![cfg(feature = "aws")]

mod support;

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use serde_json::{json, Value};
use support::aws::{aws_env, oracle, RdsStandIn, SECRET_KEY, SESSION_TOKEN};
use support::{Broker, Postgres, Relay};
use walrelay::aws::{msk, rds, Credentials};

const WAIT: Duration = Duration::from_secs(60);

/// Long-term keys, and temporary ones whose session token needs escaping.
fn identities() -> Vec<(Credentials, Option<&'static str>)> {
    vec![
        (
            Credentials::new("AKIDEXAMPLE", SECRET_KEY, None, None, "t"),
            None,
        ),
        (
            Credentials::new(
                "ASIAEXAMPLE",
                SECRET_KEY,
                Some(SESSION_TOKEN.into()),
                None,
                "t",
            ),
            Some(SESSION_TOKEN),
        ),
    ]
}

fn request(kind: &str, c: &Credentials, session: Option<&str>, region: &str, at: f64) -> Value {
    json!({
        "kind": kind,
        "access_key": c.access_key_id(),
        "secret_key": c.secret_access_key(),
        "session_token": session,
        "region": region,
        "signing_time": at,
    })
}

fn at(seconds: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs_f64(seconds)
}

#[test]
fn rds_iam_tokens_are_byte_for_byte_botocores_generate_db_auth_token() {
    let cases = [
        (
            "mydb.c9akciq32.eu-west-1.rds.amazonaws.com",
            5432,
            "walrelay",
            "eu-west-1",
            1_700_000_000.0,
        ),
        (
            "aurora.cluster-xyz.us-east-1.rds.amazonaws.com",
            6543,
            "app user+ü@x",
            "us-east-1",
            1_767_225_599.25,
        ),
        (
            "10.0.0.7",
            5432,
            "Mixed_Case-Role.v2",
            "ap-southeast-2",
            951_782_400.0,
        ),
    ];
    for (credentials, session) in identities() {
        for (host, port, user, region, time) in cases {
            let mut req = request("rds", &credentials, session, region, time);
            req["host"] = json!(host);
            req["port"] = json!(port);
            req["user"] = json!(user);
            let expected = oracle(req)["token"].as_str().unwrap().to_string();
            let ours = rds::token(host, port, user, region, &credentials, at(time)).unwrap();
            assert_eq!(
                ours,
                expected,
                "{host}:{port} {user} {region} session={}",
                session.is_some()
            );
        }
    }
}

#[test]
fn msk_iam_tokens_are_byte_for_byte_the_python_signers_with_its_expiry() {
    let decode = |t: &str| {
        String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(t)
                .unwrap(),
        )
        .unwrap()
    };
    for (credentials, session) in identities() {
        for (region, time) in [
            ("eu-west-1", 1_700_000_000.0),
            ("us-gov-west-1", 1_767_225_599.75),
        ] {
            let expected = oracle(request("msk", &credentials, session, region, time));
            let user_agent = expected["user_agent"].as_str().unwrap();
            let ours = msk::token(region, &credentials, at(time), user_agent).unwrap();
            let theirs = expected["token"].as_str().unwrap();
            assert_eq!(
                decode(&ours.token),
                decode(theirs),
                "{region} session={}",
                session.is_some()
            );
            assert_eq!(ours.token, theirs);
            assert_eq!(ours.expires_ms, expected["expiry_ms"].as_i64().unwrap());
        }
    }
}

/// `walrelay run` with `--pg-auth rds-iam` against `url`, credentials and
/// region from the environment, as on EC2, ECS or EKS.
fn rds_iam_relay(url: &str, broker: &str) -> Relay {
    let line = format!(
        "walrelay run --pg-url '{url}' --kafka-brokers {broker} --pg-auth rds-iam \
         --startup-timeout 20s --watchdog-interval 1s"
    );
    Relay::start_shell(&line, &aws_env())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rds_iam_streams_through_connections_each_logged_in_with_a_fresh_token_botocore_signs_alike(
) {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let rds = RdsStandIn::start(pg.port).await;
    // No sslmode: the default, prefer, must become require for a token.
    let url = format!("postgres://postgres@localhost:{}/postgres", rds.port);
    let relay = rds_iam_relay(&url, &broker.brokers());
    relay.wait_ready(WAIT);
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'order', 'o-1', 'Iam', '{}')",
            &[],
        )
        .await
        .unwrap();
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Iam"]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "log:\n{}", relay.log());

    // The SQL connections beside the stream (the watchdog's, every 1 s)
    // log in at their own pace: wait for a second one rather than race it.
    let deadline = std::time::Instant::now() + WAIT;
    while rds.logins().iter().filter(|l| !l.replication).count() < 2
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logins = rds.logins();
    assert_eq!(*rds.plaintext.lock().unwrap(), 0, "a login without TLS");
    assert!(
        logins.iter().any(|l| l.replication),
        "no replication login: {logins:?}"
    );
    assert!(
        logins.iter().filter(|l| !l.replication).count() >= 2,
        "{logins:?}"
    );
    for login in &logins {
        assert!(
            login.botocore_agrees,
            "a token botocore would not sign: {login:?}"
        );
        assert!(
            login.age_secs.abs() <= 5,
            "a token signed long before its login: {login:?}"
        );
        assert_eq!(login.user, "postgres");
    }
    // No secret in what an operator sees.
    let metrics = relay.http_get("/metrics").unwrap().1;
    let log = relay.log();
    for secret in [SECRET_KEY, SESSION_TOKEN, "X-Amz-Signature"]
        .into_iter()
        .map(String::from)
        .chain(logins.iter().map(|l| l.token.clone()))
    {
        assert!(!log.contains(&secret), "{secret} in the log:\n{log}");
        assert!(!metrics.contains(&secret), "{secret} in /metrics");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rds_iam_refuses_a_server_without_tls_before_sending_its_token() {
    // The test cluster offers no TLS.
    let pg = Postgres::start();
    let url = format!("postgres://postgres@localhost:{}/postgres", pg.port);
    let mut relay = rds_iam_relay(&url, "127.0.0.1:9");
    let status = relay.wait(Duration::from_secs(30)).expect("walrelay stops");
    let log = relay.log();
    assert!(!status.success());
    assert!(
        log.contains("does not accept TLS, and --pg-auth rds-iam sends its token only over TLS"),
        "{log}"
    );
    // Nothing logged in: the token never left.
    assert!(!pg.log().contains("connection authorized"), "{}", pg.log());
}

#[test]
fn rds_iam_refuses_sslmode_disable_and_a_missing_region_with_the_fix() {
    let mut relay = Relay::start_shell(
        "walrelay run --pg-url 'postgres://app@db.example:5432/shop?sslmode=disable' \
         --kafka-brokers 127.0.0.1:9 --pg-auth rds-iam",
        &aws_env(),
    );
    relay.wait(Duration::from_secs(10)).expect("walrelay stops");
    assert!(
        relay.log().contains("must not travel in clear"),
        "{}",
        relay.log()
    );
    let env: Vec<_> = aws_env()
        .into_iter()
        .filter(|(k, _)| *k != "AWS_REGION")
        .collect();
    let mut relay = Relay::start_shell(
        "env -u AWS_DEFAULT_REGION walrelay run --pg-url postgres://app@db.example/shop \
         --kafka-brokers 127.0.0.1:9 --pg-auth rds-iam",
        &env,
    );
    relay.wait(Duration::from_secs(10)).expect("walrelay stops");
    assert!(
        relay.log().contains("set AWS_REGION (or --aws-region)"),
        "{}",
        relay.log()
    );
}

/// Each token a broker received is the signed URL AWS's MSK signer makes at
/// the token's own X-Amz-Date, with walrelay's User-Agent appended after
/// signing.
fn assert_msk_tokens_are_awss(tokens: &[String]) {
    for token in tokens {
        let url = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(token)
                .expect("base64url without padding"),
        )
        .unwrap();
        let (signed, user_agent) = url.rsplit_once("&User-Agent=").expect("a User-Agent last");
        assert_eq!(user_agent, walrelay::percent::encode(msk::USER_AGENT));
        let signed_at = support::aws::signing_time(signed);
        let mut req = request(
            "msk",
            &Credentials::new(support::aws::ACCESS_KEY, SECRET_KEY, None, None, "t"),
            Some(SESSION_TOKEN),
            support::aws::REGION,
            signed_at as f64,
        );
        req["access_key"] = json!(support::aws::ACCESS_KEY);
        let theirs = oracle(req)["token"].as_str().unwrap().to_string();
        let theirs = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(theirs)
                .unwrap(),
        )
        .unwrap();
        let (their_signed, _) = theirs.rsplit_once("&User-Agent=").unwrap();
        assert_eq!(signed, their_signed);
        let age = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            - signed_at;
        assert!(age.abs() < 60, "a token signed {age}s before it was sent");
    }
}

/// A database with the outbox, a stand-in broker that captures SASL
/// OAUTHBEARER tokens, and `walrelay SUBCOMMAND` pointed at both with
/// `--kafka-auth msk-iam`. The stand-in has no TLS: -X overrides the
/// protocol --kafka-auth sets.
async fn msk_stand_in(subcommand: &str) -> (Postgres, support::aws::SaslCapture, String) {
    let pg = Postgres::start();
    pg.client_with_outbox().await;
    let broker = support::aws::SaslCapture::start();
    let line = format!(
        "walrelay {subcommand} --pg-url '{}' --kafka-brokers 127.0.0.1:{} --kafka-auth msk-iam \
         -X security.protocol=SASL_PLAINTEXT",
        pg.url(),
        broker.port
    );
    (pg, broker, line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msk_iam_tokens_reach_the_broker_from_check_s_admin_client_and_producer() {
    let (_pg, broker, line) = msk_stand_in("check").await;
    let out = support::relay::shell(&line)
        .envs(aws_env())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stdout.contains("refused walrelay's login"),
        "{stdout}\n{stderr}"
    );
    // The admin client's token (set by walrelay itself) and the probing
    // producer's (through librdkafka's refresh hook): two connections.
    let tokens = broker.tokens();
    assert!(
        tokens.len() >= 2,
        "{} token(s) reached the broker\n{stderr}",
        tokens.len()
    );
    assert_msk_tokens_are_awss(&tokens);
    for token in &tokens {
        assert!(!stdout.contains(token.as_str()) && !stderr.contains(token.as_str()));
    }
    assert!(!stderr.contains(SECRET_KEY) && !stderr.contains(SESSION_TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msk_iam_run_sends_the_token_from_its_producer_and_stops_when_the_login_is_refused() {
    let (_pg, broker, line) = msk_stand_in("run").await;
    let line = format!("{line} --startup-timeout 20s");
    let mut relay = Relay::start_shell(&line, &aws_env());
    let status = relay.wait(Duration::from_secs(40)).expect("walrelay stops");
    let log = relay.log();
    assert!(!status.success());
    assert!(log.contains("Kafka refused walrelay's login"), "{log}");
    assert!(
        log.contains("may kafka-cluster:Connect"),
        "no MSK IAM fix in:\n{log}"
    );
    let tokens = broker.tokens();
    assert!(!tokens.is_empty(), "no token reached the broker:\n{log}");
    assert_msk_tokens_are_awss(&tokens);
    for token in &tokens {
        assert!(!log.contains(token.as_str()), "a token in the log");
    }
}
