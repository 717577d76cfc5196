//! An OAuth 2.0 identity provider for the OAUTHBEARER tests, on a free port:
//! a token endpoint that grants the client-credentials requests of one
//! client with an RS256-signed JWT, and the JWKS a broker checks those
//! tokens with. librdkafka sends the client's id and secret as HTTP Basic
//! credentials and `grant_type=client_credentials&scope=…` as the form
//! (src/rdkafka_sasl_oauthbearer_oidc.c); the provider records each
//! request, so a test asserts what arrived, and each token it issued, so a
//! test asserts that none shows in walrelay's output.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::sign::Signer;
use openssl::ssl::{SslAcceptor, SslMethod};
use openssl::x509::extension::{BasicConstraints, KeyUsage, SubjectAlternativeName};
use openssl::x509::{X509Builder, X509NameBuilder, X509};
use serde_json::json;

/// The `iss` of every token, which the broker expects.
pub const ISSUER: &str = "walrelay-test-idp";
/// The `aud` of a token, which the broker expects; unless the scope asks
/// for another resource as Entra ID's do (`api://RESOURCE/.default`).
pub const AUDIENCE: &str = "kafka-broker";
const KEY_ID: &str = "walrelay-test-key-1";

/// One request to the token endpoint, as it arrived.
#[derive(Clone, Debug)]
pub struct TokenRequest {
    /// The HTTP Basic credentials: (client id, client secret).
    pub credentials: Option<(String, String)>,
    /// The form fields (`grant_type`, `scope`).
    pub form: HashMap<String, String>,
}

pub struct IdentityProvider {
    pub port: u16,
    client_id: String,
    client_secret: String,
    state: Arc<State>,
}

/// The provider's token endpoint over HTTPS, on a port of its own, with a
/// certificate for `localhost` that a CA of the test's own signed. It
/// grants the same client with the same key as the provider's plain one.
pub struct TlsEndpoint {
    pub port: u16,
    /// The CA's certificate, PEM (for `-X https.ca.location`).
    pub ca_pem: PathBuf,
}

impl TlsEndpoint {
    /// The URL walrelay asks for tokens over HTTPS.
    pub fn token_url(&self) -> String {
        format!("https://localhost:{}/token", self.port)
    }
}

struct State {
    key: PKey<Private>,
    requests: Mutex<Vec<TokenRequest>>,
    issued: Mutex<Vec<String>>,
}

impl IdentityProvider {
    /// A provider that knows one client, `client_id` with `client_secret`,
    /// serving until the test binary exits.
    pub fn start(client_id: &str, client_secret: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
        let state = Arc::new(State {
            key,
            requests: Mutex::default(),
            issued: Mutex::default(),
        });
        let provider = IdentityProvider {
            port,
            client_id: client_id.to_string(),
            client_secret: client_secret.to_string(),
            state: state.clone(),
        };
        let client = (client_id.to_string(), client_secret.to_string());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (state, client) = (state.clone(), client.clone());
                // The broker's JWKS refresh and librdkafka's token requests
                // may come at once.
                std::thread::spawn(move || serve(stream, &state, &client));
            }
        });
        provider
    }

    /// The token endpoint over HTTPS as well, serving until the test binary
    /// exits.
    pub fn start_tls(&self) -> TlsEndpoint {
        let (ca, ca_key) = certificate("walrelay test OIDC CA", None);
        let (server, server_key) = certificate("localhost", Some((&ca, &ca_key)));
        let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).unwrap();
        acceptor.set_private_key(&server_key).unwrap();
        acceptor.set_certificate(&server).unwrap();
        acceptor.check_private_key().unwrap();
        let acceptor = Arc::new(acceptor.build());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let dir =
            std::env::temp_dir().join(format!("walrelay-test-oidc-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_pem = dir.join("ca.pem");
        std::fs::write(&ca_pem, ca.to_pem().unwrap()).unwrap();
        let state = self.state.clone();
        let client = (self.client_id.clone(), self.client_secret.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (state, client, acceptor) = (state.clone(), client.clone(), acceptor.clone());
                std::thread::spawn(move || {
                    // A client that does not trust the certificate hangs up
                    // in the handshake: nothing to serve.
                    if let Ok(stream) = acceptor.accept(stream) {
                        serve(stream, &state, &client);
                    }
                });
            }
        });
        TlsEndpoint { port, ca_pem }
    }

    /// The URL walrelay asks for tokens (`-X sasl.oauthbearer.token.endpoint.url`).
    pub fn token_url(&self) -> String {
        format!("http://127.0.0.1:{}/token", self.port)
    }

    /// The URL the broker reads the signing key from.
    pub fn jwks_url(&self) -> String {
        format!("http://127.0.0.1:{}/jwks", self.port)
    }

    /// The `-X` flags that log walrelay in through this provider with
    /// `secret` (the client's own, or a wrong one) and `scope`.
    pub fn login_flags(&self, secret: &str, scope: &str) -> Vec<String> {
        self.login_flags_at(&self.token_url(), secret, scope)
    }

    /// `login_flags`, asking `token_url` for the token.
    pub fn login_flags_at(&self, token_url: &str, secret: &str, scope: &str) -> Vec<String> {
        [
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.client.id", &self.client_id),
            ("sasl.oauthbearer.client.secret", secret),
            ("sasl.oauthbearer.scope", scope),
            ("sasl.oauthbearer.token.endpoint.url", token_url),
        ]
        .iter()
        .flat_map(|(k, v)| ["-X".to_string(), format!("{k}={v}")])
        .collect()
    }

    /// The client's own secret.
    pub fn client_secret(&self) -> &str {
        &self.client_secret
    }

    /// Every request to the token endpoint so far.
    pub fn requests(&self) -> Vec<TokenRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Every token issued so far.
    pub fn issued(&self) -> Vec<String> {
        self.state.issued.lock().unwrap().clone()
    }
}

fn serve(mut stream: impl Read + Write, state: &State, client: &(String, String)) {
    let mut reader = BufReader::new(&mut stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    let (status, answer) = match path {
        "/jwks" => (200, jwks(&state.key)),
        "/token" => {
            let request = TokenRequest {
                credentials: headers.get("authorization").and_then(|h| basic(h)),
                form: form(&String::from_utf8_lossy(&body)),
            };
            state.requests.lock().unwrap().push(request.clone());
            let granted = request.credentials.as_ref() == Some(client)
                && request.form.get("grant_type").map(String::as_str) == Some("client_credentials");
            if granted {
                let token = token(&state.key, &client.0, request.form.get("scope"));
                state.issued.lock().unwrap().push(token.clone());
                let answer = json!({
                    "access_token": token,
                    "token_type": "Bearer",
                    "expires_in": 3600,
                });
                (200, answer)
            } else {
                // RFC 6749 section 5.2.
                let answer = json!({
                    "error": "invalid_client",
                    "error_description": "client authentication failed",
                });
                (401, answer)
            }
        }
        _ => (404, json!({"error": "not_found"})),
    };
    drop(reader);
    let body = answer.to_string();
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        _ => "Not Found",
    };
    let _ = stream.write_all(
        format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}

/// The (id, secret) of an `Authorization: Basic …` header.
fn basic(header: &str) -> Option<(String, String)> {
    let encoded = header.strip_prefix("Basic ")?;
    let decoded = String::from_utf8(STANDARD.decode(encoded).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((id.to_string(), secret.to_string()))
}

/// An application/x-www-form-urlencoded body (librdkafka sends the scope
/// as configured, unescaped).
fn form(body: &str) -> HashMap<String, String> {
    body.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.replace('+', " ")))
        .collect()
}

/// A JWT for `subject`, signed RS256 with `key`, valid for an hour.
fn token(key: &PKey<Private>, subject: &str, scope: Option<&String>) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = json!({"alg": "RS256", "typ": "JWT", "kid": KEY_ID});
    let claims = json!({
        "iss": ISSUER,
        "aud": audience(scope.map(String::as_str)),
        "sub": subject,
        "scope": scope.cloned().unwrap_or_default(),
        "iat": now,
        "exp": now + 3600,
        "jti": format!("{subject}-{now}-{}", std::process::id()),
    });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut signer = Signer::new(MessageDigest::sha256(), key).unwrap();
    signer.update(signing_input.as_bytes()).unwrap();
    let signature = signer.sign_to_vec().unwrap();
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// The resource a scope asks a token for: `api://RESOURCE/.default`, or
/// the broker.
fn audience(scope: Option<&str>) -> &str {
    scope
        .and_then(|s| s.strip_prefix("api://"))
        .and_then(|s| s.strip_suffix("/.default"))
        .unwrap_or(AUDIENCE)
}

/// The JWK Set (RFC 7517) with the public half of `key`.
fn jwks(key: &PKey<Private>) -> serde_json::Value {
    let rsa = key.rsa().unwrap();
    json!({"keys": [{
        "kty": "RSA",
        "use": "sig",
        "alg": "RS256",
        "kid": KEY_ID,
        "n": URL_SAFE_NO_PAD.encode(rsa.n().to_vec()),
        "e": URL_SAFE_NO_PAD.encode(rsa.e().to_vec()),
    }]})
}

/// A certificate for `name`, valid for two days, with its key: a CA's,
/// self-signed, without an `issuer`; else a server's for `localhost`,
/// signed by the issuer.
fn certificate(name: &str, issuer: Option<(&X509, &PKey<Private>)>) -> (X509, PKey<Private>) {
    let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    let mut subject = X509NameBuilder::new().unwrap();
    subject.append_entry_by_text("CN", name).unwrap();
    let subject = subject.build();
    let mut builder = X509Builder::new().unwrap();
    builder.set_version(2).unwrap();
    let serial = BigNum::from_u32(if issuer.is_some() { 2 } else { 1 }).unwrap();
    builder
        .set_serial_number(&serial.to_asn1_integer().unwrap())
        .unwrap();
    builder.set_subject_name(&subject).unwrap();
    builder.set_pubkey(&key).unwrap();
    builder
        .set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    builder
        .set_not_after(&Asn1Time::days_from_now(2).unwrap())
        .unwrap();
    match issuer {
        None => {
            builder.set_issuer_name(&subject).unwrap();
            let ca = BasicConstraints::new().critical().ca().build().unwrap();
            builder.append_extension(ca).unwrap();
            let usage = KeyUsage::new()
                .critical()
                .key_cert_sign()
                .crl_sign()
                .build();
            builder.append_extension(usage.unwrap()).unwrap();
            builder.sign(&key, MessageDigest::sha256()).unwrap();
        }
        Some((ca, ca_key)) => {
            builder.set_issuer_name(ca.subject_name()).unwrap();
            let names = SubjectAlternativeName::new()
                .dns("localhost")
                .build(&builder.x509v3_context(Some(ca), None))
                .unwrap();
            builder.append_extension(names).unwrap();
            builder.sign(ca_key, MessageDigest::sha256()).unwrap();
        }
    }
    (builder.build(), key)
}
