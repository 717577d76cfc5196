//! AWS without AWS: the oracle (AWS's own token builders, from PyPI, run by
//! tests/fixtures/aws_oracle.py) and a stand-in for an RDS endpoint that
//! checks each IAM login as RDS does, then hands the session to a real
//! Postgres.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use openssl::asn1::Asn1Time;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::rsa::Rsa;
use openssl::ssl::{SslAcceptor, SslMethod};
use openssl::x509::extension::SubjectAlternativeName;
use openssl::x509::{X509NameBuilder, X509};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Test credentials: the AWS documentation's example key, and a session
/// token with characters that need escaping.
pub const ACCESS_KEY: &str = "ASIAWALRELAYEXAMPLE";
pub const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
pub const SESSION_TOKEN: &str = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ+x/y=";
pub const REGION: &str = "eu-west-1";

/// The environment that gives walrelay those credentials through the
/// default chain's first link, and the region.
pub fn aws_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_SESSION_TOKEN", SESSION_TOKEN),
        ("AWS_REGION", REGION),
        // Nothing on this machine should be asked, whatever happens.
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_CONFIG_FILE", "/dev/null"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
    ]
}

/// One answer of AWS's builders for `request` (see aws_oracle.py).
pub fn oracle(request: Value) -> Value {
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

/// The `X-Amz-Date` of a signed URL or token, as seconds since the epoch.
pub fn signing_time(signed: &str) -> i64 {
    let date = signed
        .split(['?', '&'])
        .find_map(|p| p.strip_prefix("X-Amz-Date="))
        .expect("an X-Amz-Date");
    let t = time_from(date);
    t.expect("X-Amz-Date is YYYYMMDDTHHMMSSZ")
}

fn time_from(date: &str) -> Option<i64> {
    let n = |r: std::ops::Range<usize>| date.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(4..6)?, n(6..8)?);
    let (hh, mm, ss) = (n(9..11)?, n(11..13)?, n(13..15)?);
    // Days from civil (Howard Hinnant's algorithm).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// One login the stand-in saw.
#[derive(Debug, Clone)]
pub struct Login {
    pub user: String,
    /// The startup message asked for a replication connection.
    pub replication: bool,
    pub token: String,
    /// The token is what botocore signs for this host, port, user, region
    /// and credentials at the token's own X-Amz-Date, byte for byte.
    pub botocore_agrees: bool,
    /// Seconds between the token's X-Amz-Date and its arrival.
    pub age_secs: i64,
}

/// An RDS endpoint stand-in on `127.0.0.1:port` (reached as `localhost`):
/// TLS only, a cleartext password asked over it (as RDS asks an IAM user),
/// the password checked as an IAM token with botocore, and then the
/// session handed to a real Postgres that trusts local TCP logins.
pub struct RdsStandIn {
    pub port: u16,
    pub logins: Arc<Mutex<Vec<Login>>>,
    /// Connections that did not ask for TLS first.
    pub plaintext: Arc<Mutex<u32>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RdsStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RdsStandIn {
    pub async fn start(postgres_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let acceptor = Arc::new(acceptor());
        let logins = Arc::new(Mutex::new(Vec::new()));
        let plaintext = Arc::new(Mutex::new(0));
        let (l, p) = (logins.clone(), plaintext.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, logins, plaintext) = (acceptor.clone(), l.clone(), p.clone());
                tokio::spawn(async move {
                    serve(socket, acceptor, port, postgres_port, logins, plaintext).await;
                });
            }
        });
        RdsStandIn {
            port,
            logins,
            plaintext,
            task,
        }
    }

    pub fn logins(&self) -> Vec<Login> {
        self.logins.lock().unwrap().clone()
    }
}

/// A TLS acceptor with a self-signed certificate for localhost.
fn acceptor() -> SslAcceptor {
    let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_text("CN", "localhost").unwrap();
    let name = name.build();
    let mut cert = X509::builder().unwrap();
    cert.set_version(2).unwrap();
    cert.set_subject_name(&name).unwrap();
    cert.set_issuer_name(&name).unwrap();
    cert.set_pubkey(&key).unwrap();
    cert.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    cert.set_not_after(&Asn1Time::days_from_now(2).unwrap())
        .unwrap();
    let san = SubjectAlternativeName::new()
        .dns("localhost")
        .build(&cert.x509v3_context(None, None))
        .unwrap();
    cert.append_extension(san).unwrap();
    cert.sign(&key, MessageDigest::sha256()).unwrap();
    let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).unwrap();
    acceptor.set_private_key(&key).unwrap();
    acceptor.set_certificate(&cert.build()).unwrap();
    acceptor.build()
}

const SSL_REQUEST: i32 = 80_877_103;

async fn serve(
    mut socket: TcpStream,
    acceptor: Arc<SslAcceptor>,
    port: u16,
    postgres_port: u16,
    logins: Arc<Mutex<Vec<Login>>>,
    plaintext: Arc<Mutex<u32>>,
) {
    let mut head = [0u8; 8];
    if socket.read_exact(&mut head).await.is_err() {
        return;
    }
    if i32::from_be_bytes(head[4..8].try_into().unwrap()) != SSL_REQUEST {
        *plaintext.lock().unwrap() += 1;
        return;
    }
    socket.write_all(b"S").await.unwrap();
    let ssl = openssl::ssl::Ssl::new(acceptor.context()).unwrap();
    let mut tls = tokio_openssl::SslStream::new(ssl, socket).unwrap();
    if std::pin::Pin::new(&mut tls).accept().await.is_err() {
        return;
    }
    // The startup message, kept whole for the real server.
    let mut len = [0u8; 4];
    tls.read_exact(&mut len).await.unwrap();
    let mut startup = vec![0u8; i32::from_be_bytes(len) as usize - 4];
    tls.read_exact(&mut startup).await.unwrap();
    let params: Vec<String> = startup[4..]
        .split(|b| *b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    let param = |key: &str| {
        params
            .chunks(2)
            .find(|kv| kv[0] == key)
            .and_then(|kv| kv.get(1).cloned())
    };
    let user = param("user").unwrap_or_default();
    let replication = param("replication").is_some();
    // AuthenticationCleartextPassword, then the PasswordMessage.
    tls.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3])
        .await
        .unwrap();
    let mut tag = [0u8; 5];
    tls.read_exact(&mut tag).await.unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(tag[1..5].try_into().unwrap()) as usize - 4];
    tls.read_exact(&mut body).await.unwrap();
    let token = String::from_utf8_lossy(&body[..body.len() - 1]).into_owned();
    let signed_at = signing_time(&token);
    let expected = {
        let user = user.clone();
        tokio::task::spawn_blocking(move || {
            oracle(json!({
                "kind": "rds",
                "access_key": ACCESS_KEY,
                "secret_key": SECRET_KEY,
                "session_token": SESSION_TOKEN,
                "region": REGION,
                "signing_time": signed_at,
                "host": "localhost",
                "port": port,
                "user": user,
            }))
        })
        .await
        .unwrap()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let login = Login {
        user: user.clone(),
        replication,
        botocore_agrees: expected["token"].as_str() == Some(token.as_str()),
        token,
        age_secs: now - signed_at,
    };
    let accepted = login.botocore_agrees && login.age_secs.abs() < 120;
    logins.lock().unwrap().push(login);
    if !accepted {
        // What RDS answers a token it does not accept.
        let mut error = Vec::new();
        for (field, text) in [
            (b'S', "FATAL"),
            (b'C', "28000"),
            (
                b'M',
                &format!("PAM authentication failed for user \"{user}\""),
            ),
        ] {
            error.push(field);
            error.extend_from_slice(text.as_bytes());
            error.push(0);
        }
        error.push(0);
        let mut message = vec![b'E'];
        message.extend_from_slice(&(error.len() as i32 + 4).to_be_bytes());
        message.extend_from_slice(&error);
        let _ = tls.write_all(&message).await;
        return;
    }
    // The same startup to the real server, which trusts it: its
    // AuthenticationOk is the answer to the token.
    let mut server = TcpStream::connect(("127.0.0.1", postgres_port))
        .await
        .unwrap();
    server.write_all(&len).await.unwrap();
    server.write_all(&startup).await.unwrap();
    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
}

/// A stand-in Kafka broker on `127.0.0.1:port` that captures SASL
/// OAUTHBEARER logins: it answers ApiVersions and SaslHandshake (offering
/// OAUTHBEARER only), keeps the token of each SaslAuthenticate, and refuses
/// it (SASL_AUTHENTICATION_FAILED), since only AWS can check a SigV4
/// signature with the secret key it holds.
pub struct SaslCapture {
    pub port: u16,
    pub tokens: Arc<Mutex<Vec<String>>>,
}

impl SaslCapture {
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let captured = tokens.clone();
        std::thread::spawn(move || {
            for socket in listener.incoming().flatten() {
                let captured = captured.clone();
                std::thread::spawn(move || {
                    let _ = kafka_conversation(socket, &captured);
                });
            }
        });
        SaslCapture { port, tokens }
    }

    pub fn tokens(&self) -> Vec<String> {
        self.tokens.lock().unwrap().clone()
    }
}

fn kafka_conversation(
    mut socket: std::net::TcpStream,
    tokens: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    socket.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    loop {
        let mut size = [0u8; 4];
        socket.read_exact(&mut size)?;
        let mut request = vec![0u8; i32::from_be_bytes(size) as usize];
        socket.read_exact(&mut request)?;
        let api_key = i16::from_be_bytes([request[0], request[1]]);
        let correlation = &request[4..8];
        let client_id_len = i16::from_be_bytes([request[8], request[9]]).max(0) as usize;
        let body = &request[10 + client_id_len..];
        let mut response = correlation.to_vec();
        match api_key {
            // ApiVersions v3 (flexible body; its response header stays v0).
            18 => {
                response.extend_from_slice(&0i16.to_be_bytes());
                let apis: [(i16, i16, i16); 3] = [(18, 0, 3), (17, 0, 1), (36, 0, 1)];
                response.push(apis.len() as u8 + 1);
                for (key, min, max) in apis {
                    for v in [key, min, max] {
                        response.extend_from_slice(&v.to_be_bytes());
                    }
                    response.push(0);
                }
                response.extend_from_slice(&0i32.to_be_bytes());
                response.push(0);
            }
            // SaslHandshake v1: OAUTHBEARER is all there is.
            17 => {
                response.extend_from_slice(&0i16.to_be_bytes());
                response.extend_from_slice(&1i32.to_be_bytes());
                response.extend_from_slice(&11i16.to_be_bytes());
                response.extend_from_slice(b"OAUTHBEARER");
            }
            // SaslAuthenticate v0/v1: RFC 7628's initial response,
            // "n,,\x01auth=Bearer TOKEN\x01\x01".
            36 => {
                let len = i32::from_be_bytes(body[0..4].try_into().unwrap()) as usize;
                let message = String::from_utf8_lossy(&body[4..4 + len]).into_owned();
                if let Some(token) = message
                    .split('\x01')
                    .find_map(|kv| kv.strip_prefix("auth=Bearer "))
                {
                    tokens.lock().unwrap().push(token.to_string());
                }
                let text = b"stand-in broker: token captured, not checked";
                response.extend_from_slice(&58i16.to_be_bytes());
                response.extend_from_slice(&(text.len() as i16).to_be_bytes());
                response.extend_from_slice(text);
                response.extend_from_slice(&0i32.to_be_bytes());
                response.extend_from_slice(&0i64.to_be_bytes());
            }
            _ => return Ok(()),
        }
        let mut framed = (response.len() as i32).to_be_bytes().to_vec();
        framed.extend_from_slice(&response);
        socket.write_all(&framed)?;
    }
}
