//! walrelay's AWS tokens against AWS's own builders, byte for byte, for the
//! same inputs, credentials and clock: botocore's `generate_db_auth_token`
//! for RDS/Aurora IAM, and `aws-msk-iam-sasl-signer-python` for MSK IAM
//! (tests/fixtures/aws_oracle.py, from PyPI through scripts/aws-oracle.sh).
#![cfg(feature = "aws")]

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use serde_json::{json, Value};
use walrelay::aws::{msk, rds, Credentials};

fn oracle(request: Value) -> Value {
    let root = env!("CARGO_MANIFEST_DIR");
    let python = Command::new(format!("{root}/scripts/aws-oracle.sh"))
        .output()
        .expect("run scripts/aws-oracle.sh");
    assert!(
        python.status.success(),
        "scripts/aws-oracle.sh failed: {}",
        String::from_utf8_lossy(&python.stderr)
    );
    let python = String::from_utf8(python.stdout).unwrap();
    let mut child = Command::new(python.trim())
        .arg(format!("{root}/tests/fixtures/aws_oracle.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the oracle");
    serde_json::to_writer(child.stdin.take().unwrap(), &request).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Long-term keys, and temporary ones whose session token needs escaping.
fn identities() -> Vec<(Credentials, Option<&'static str>)> {
    let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    let session = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ+x/y=";
    vec![
        (
            Credentials::new("AKIDEXAMPLE", secret, None, None, "t"),
            None,
        ),
        (
            Credentials::new("ASIAEXAMPLE", secret, Some(session.into()), None, "t"),
            Some(session),
        ),
    ]
}

fn request(
    kind: &str,
    credentials: &Credentials,
    session: Option<&str>,
    region: &str,
    at: f64,
) -> Value {
    json!({
        "kind": kind,
        "access_key": credentials.access_key_id(),
        "secret_key": credentials.secret_access_key(),
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
    for (credentials, session) in identities() {
        for (region, time) in [
            ("eu-west-1", 1_700_000_000.0),
            ("us-gov-west-1", 1_767_225_599.75),
        ] {
            let expected = oracle(request("msk", &credentials, session, region, time));
            let user_agent = expected["user_agent"].as_str().unwrap();
            let ours = msk::token(region, &credentials, at(time), user_agent).unwrap();
            let decode = |t: &str| {
                String::from_utf8(
                    base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(t)
                        .unwrap(),
                )
                .unwrap()
            };
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
