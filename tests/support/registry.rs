//! A real schema registry for the Avro tests: Apicurio Registry 3.3.3 with
//! its Confluent-compatible API (scripts/apicurio.sh), started as the
//! broker is, on free ports, stopped when dropped; and Python
//! confluent-kafka's AvroDeserializer, a consumer Avro users already run.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, TempDir};

pub struct SchemaRegistry {
    pub port: u16,
    management: u16,
    /// With TLS: the CA that signed its certificate (for localhost).
    pub ca: Option<PathBuf>,
    /// With OIDC: the JWKS URL and the issuer its tokens must name.
    oidc: Option<(String, String)>,
    child: Option<Child>,
    dir: TempDir,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/apicurio.sh")
}

fn script_output(arg: &str) -> String {
    let out = Command::new(script()).arg(arg).output().unwrap();
    assert!(
        out.status.success(),
        "scripts/apicurio.sh {arg}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

impl SchemaRegistry {
    /// Fetched once (scripts/apicurio.sh fetch), then started and waited
    /// for until its health says ready.
    pub fn start() -> Self {
        Self::started(TempDir::new("apicurio"), None, None)
    }

    /// `start`, serving HTTPS with a certificate for localhost from a CA
    /// of its own (`ca`).
    pub fn start_tls() -> Self {
        let dir = TempDir::new("apicurio");
        super::localhost_certificates(&dir.0);
        let ca = dir.0.join("ca.pem");
        Self::started(dir, Some(ca), None)
    }

    /// `start`, with every API call needing a bearer token that `jwks`
    /// (an identity provider's key set URL) signed for `issuer`.
    pub fn start_oidc(jwks: &str, issuer: &str) -> Self {
        let oidc = (jwks.to_string(), issuer.to_string());
        Self::started(TempDir::new("apicurio"), None, Some(oidc))
    }

    fn started(dir: TempDir, ca: Option<PathBuf>, oidc: Option<(String, String)>) -> Self {
        script_output("fetch");
        let mut registry = SchemaRegistry {
            port: free_port(),
            management: free_port(),
            ca,
            oidc,
            child: None,
            dir,
        };
        registry.restart();
        registry
    }

    /// Starts it (again) on its ports; an in-memory registry starts empty.
    pub fn restart(&mut self) {
        self.kill();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.0.join("registry.log"))
            .unwrap();
        let mut command = Command::new(script());
        if self.ca.is_some() {
            command
                .env("WALRELAY_APICURIO_TLS_CERT", self.dir.0.join("server.crt"))
                .env("WALRELAY_APICURIO_TLS_KEY", self.dir.0.join("server.key"));
        }
        if let Some((jwks, issuer)) = &self.oidc {
            command
                .env("WALRELAY_APICURIO_OIDC_JWKS", jwks)
                .env("WALRELAY_APICURIO_OIDC_ISSUER", issuer);
        }
        let child = command
            .args(["run", &self.port.to_string(), &self.management.to_string()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        self.wait_ready(self.management, Duration::from_secs(120));
    }

    fn wait_ready(&mut self, management: u16, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("the registry exited ({status}):\n{}", self.log());
                }
            }
            if http_get(management, "/health/ready").is_some_and(|(status, _)| status == 200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("the registry was not ready in {timeout:?}:\n{}", self.log());
    }

    /// The Confluent-compatible API's URL, as --schema-registry-url takes it.
    pub fn url(&self) -> String {
        match self.ca {
            None => format!("http://127.0.0.1:{}/apis/ccompat/v7", self.port),
            Some(_) => format!("https://localhost:{}/apis/ccompat/v7", self.port),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("registry.log")).unwrap_or_default()
    }

    /// GET on the Confluent-compatible API: (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(self.port, &format!("/apis/ccompat/v7{path}")).expect("the registry answers")
    }

    /// GET with an `Authorization` header, for a registry behind OIDC.
    pub fn get_as(&self, path: &str, authorization: &str) -> (u16, String) {
        let path = format!("/apis/ccompat/v7{path}");
        http(self.port, "GET", &path, None, Some(authorization)).expect("the registry answers")
    }

    /// A request with a JSON body on the Confluent-compatible API.
    pub fn send(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        http(
            self.port,
            method,
            &format!("/apis/ccompat/v7{path}"),
            Some(body),
            None,
        )
        .expect("the registry answers")
    }

    /// Stops it (SIGKILL), keeping its port for a restart test's silence.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SchemaRegistry {
    fn drop(&mut self) {
        // The script execs java, so the child is the JVM itself.
        self.kill();
    }
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http(port, "GET", path, None, None)
}

fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    authorization: Option<&str>,
) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let body = body.unwrap_or("");
    let authorization =
        authorization.map_or_else(String::new, |a| format!("Authorization: {a}\r\n"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         {authorization}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Some((status, body))
}

/// Reads `count` records of `topic` from the beginning with Python
/// confluent-kafka's AvroDeserializer for keys and values, and returns
/// them as JSON, ordered by key then offset: `[{"key":…,"value":…}, …]`
/// (Avro bytes as Base64, decimals as strings). `registry` is the
/// registry's URL, or the SchemaRegistryClient's whole configuration as a
/// JSON object (`{"url": …, "bearer.auth.credentials.source": …}`).
pub fn read_with_confluent_kafka(
    brokers: &str,
    registry: &str,
    topic: &str,
    count: usize,
    avro_keys: bool,
) -> serde_json::Value {
    read_with_deserializer("avro", brokers, registry, topic, count, avro_keys)
}

/// What confluent-kafka's deserializer for `format` reads from `topic`:
/// "avro" (AvroDeserializer) or "json" (JSONDeserializer, which takes the
/// writer's schema from the registry and validates each value against
/// it).
pub fn read_with_deserializer(
    format: &str,
    brokers: &str,
    registry: &str,
    topic: &str,
    count: usize,
    registry_keys: bool,
) -> serde_json::Value {
    let python = script_output("python");
    // Partitions assigned, not subscribed: no consumer group to join or
    // leave, which some brokers answer slowly.
    let reader = fixture("registry_reader.py");
    let out = Command::new("timeout")
        .arg("120")
        .arg(&python)
        .arg(&reader)
        .args([
            brokers,
            registry,
            topic,
            &count.to_string(),
            if registry_keys { "1" } else { "0" },
            format,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "confluent-kafka's {format} deserializer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What a Protobuf consumer reads from `topic` (tests/fixtures/
/// protobuf_oracle.py): its class compiled by protoc from the value
/// subject's schema, each value read by confluent-kafka's
/// ProtobufDeserializer; with `key_message`, keys in the wire format too.
/// `[{"key", "key_indexes", "value"}, …]`, messages as MessageToDict
/// writes them.
pub fn read_with_protobuf(
    brokers: &str,
    registry: &str,
    topic: &str,
    count: usize,
    value_message: &str,
    key_message: Option<&str>,
) -> serde_json::Value {
    let python = script_output("python");
    let oracle =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/protobuf_oracle.py");
    let count = count.to_string();
    let mut args = vec![brokers, registry, topic, &count, value_message];
    args.extend(key_message);
    let out = Command::new("timeout")
        .arg("120")
        .arg(&python)
        .arg(&oracle)
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Protobuf consumer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}
