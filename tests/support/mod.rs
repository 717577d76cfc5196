//! Shared test support: a private Postgres cluster, a Kafka broker (tansu or
//! Apache Kafka) and the walrelay binary, each on free ports, each
//! killable. Nothing is mocked.

#![allow(dead_code)]

pub mod aws;
pub mod debezium;
pub mod doctest;
pub mod exactly_once;
pub mod guarantees;
pub mod kafka;
pub mod kerberos;
pub mod oidc;
pub mod outbox;
pub mod pg;
pub mod promtool;
pub mod registry;
pub mod relay;
pub mod standby;
pub mod webhook;

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use kafka::{Broker, BrokerKind};
pub use pg::Postgres;
pub use relay::Relay;

/// A port nobody listens on right now, taken below the kernel's ephemeral
/// range (32768–60999 by default). A port from `bind(…:0)` comes from that
/// range, and so does the local port of every outgoing connection: between
/// the test choosing it and the child binding it, a JVM's connection to
/// Kafka or Postgres could take it (it did once in CI, failing walrelay's
/// --metrics-addr). Ports below the range are handed out only on request.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    // Each test binary starts at its own place in 20000..32000, and walks on,
    // so that two binaries or two tests rarely try the same port.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let seed = (std::process::id().wrapping_mul(2_654_435_761) ^ nanos()) % SPAN;
    let _ = NEXT.compare_exchange(0, seed + 1, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() && claim(port) {
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN)
}

/// Claims `port` for this process among every test process on the machine:
/// a port free now may be handed to a broker of another test binary that
/// has not bound it yet (two binaries ran side by side and started two
/// brokers on one port). The claim is a file naming the process; a claim
/// whose process is gone is taken over.
fn claim(port: u16) -> bool {
    use std::io::Write;
    let dir = std::env::temp_dir().join("walrelay-test-ports");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(port.to_string());
    let me = std::process::id();
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => return file.write_all(me.to_string().as_bytes()).is_ok(),
            Err(_) => {
                let owner = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|text| text.trim().parse::<u32>().ok());
                let fresh = std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().unwrap_or_default() < Duration::from_secs(5));
                match owner {
                    Some(pid) if pid == me => return true,
                    // Its process is alive: the port is taken.
                    Some(pid) if std::path::Path::new(&format!("/proc/{pid}")).exists() => {
                        return false
                    }
                    // Being written this moment by another process.
                    None if fresh => return false,
                    // Its process is gone: take it over.
                    _ => {
                        let _ = std::fs::remove_file(&path);
                    }
                }
            }
        }
    }
    false
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}

/// A CA (`ca.pem`, `ca.key`) and a certificate for localhost it signed
/// (`server.crt`, `server.key`), made in `dir` by the openssl command, for
/// servers the tests run with TLS.
pub fn localhost_certificates(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=walrelay test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
}

/// A fresh directory for one test's processes, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("walrelay-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

/// kill -9 through `&` and the child reaped, then `dir` removed (unless
/// WALRELAY_KEEP_TEST_DIRS): a process a static holds, stopped when the
/// test binary exits, where its `Child` is out of reach.
pub fn stop_from_exit(child: Option<&std::process::Child>, dir: &TempDir) {
    if let Some(child) = child {
        let pid = child.id() as i32;
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    if std::env::var_os("WALRELAY_KEEP_TEST_DIRS").is_none() {
        let _ = std::fs::remove_dir_all(&dir.0);
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("WALRELAY_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Runs the walrelay binary once with `args`: (success, stdout, stderr).
pub fn walrelay(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `walrelay check --json ARGS`, with no WALRELAY_PG_URL from the
/// environment: (success, the report, stdout and stderr).
pub fn check_json(args: &[String]) -> (bool, serde_json::Value, String) {
    check_json_with_env(args, &[])
}

/// `check_json` with `env` set for walrelay besides.
pub fn check_json_with_env(
    args: &[String],
    env: &[(String, String)],
) -> (bool, serde_json::Value, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["check", "--json"])
        .args(args)
        .env_remove("WALRELAY_PG_URL")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\n{stderr}"));
    (out.status.success(), doc, format!("{stdout}\n{stderr}"))
}

/// The check `name` of a `walrelay check --json` report.
pub fn check_entry<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {doc:#}"))
}

/// Every metric the Metrics section of docs/operations.md lists.
pub fn documented_metrics() -> std::collections::BTreeSet<String> {
    let ops = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let section = ops
        .split("\n## Metrics\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/operations.md has a Metrics section");
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `walrelay_"))
        .filter_map(|rest| rest.split('`').next())
        .map(|name| format!("walrelay_{name}"))
        .collect()
}

/// Polls `check` until it returns Some or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// GET a path of an HTTP server on a local `port` (walrelay's metrics
/// endpoint, Kafka Connect's REST API): (status, body).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// Waits until the walrelay serving metrics on `port` answers /readyz with
/// 200; `log` tells why not when it never does.
pub fn wait_ready(port: u16, timeout: Duration, log: impl Fn() -> String) {
    let deadline = Instant::now() + timeout;
    while http_get(port, "/readyz").map(|(s, _)| s) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "walrelay never became ready; log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn signal(pid: u32, sig: i32) {
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
}

/// SIGSTOP, and back only once every thread of `pid` is stopped. `kill`
/// returns before the stop takes effect: a thread waiting for a CPU stops
/// when it next runs, which on a loaded machine was measured at 12-14 ms
/// later, long enough for a broker to acknowledge a record the test meant
/// it never to see.
pub fn stop(pid: u32) {
    signal(pid, libc::SIGSTOP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !every_thread_stopped(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} did not stop within 10s of SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether every thread of `pid` is in the stopped state (`T` in /proc).
fn every_thread_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        // The state follows the command name, which is in parentheses and
        // may hold spaces.
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state == "T")
        })
    })
}

/// The usual set-up: a cluster with the default outbox table, a broker, and
/// a walrelay (started with `flags`) that is streaming.
pub struct Stack {
    pub pg: Postgres,
    pub broker: Broker,
    pub client: tokio_postgres::Client,
    pub relay: Relay,
}

/// The default outbox table, sql/outbox.sql.
pub const OUTBOX_SQL: &str = include_str!("../../sql/outbox.sql");

impl Stack {
    pub async fn start(flags: &[&str]) -> Self {
        Self::start_on(OUTBOX_SQL, flags).await
    }

    /// Like `start`, with the database prepared by `sql` (the outbox table
    /// a test needs) in place of the default outbox.
    pub async fn start_on(sql: &str, flags: &[&str]) -> Self {
        Self::start_full(BrokerKind::from_env(), sql, flags).await
    }

    /// Like `start`, on a broker of `kind`.
    pub async fn start_kind(kind: BrokerKind, flags: &[&str]) -> Self {
        Self::start_full(kind, OUTBOX_SQL, flags).await
    }

    async fn start_full(kind: BrokerKind, sql: &str, flags: &[&str]) -> Self {
        let pg = Postgres::start();
        let broker = Broker::start_kind(kind);
        let client = pg.client().await;
        client.batch_execute(sql).await.unwrap();
        let relay = Relay::start_with(&pg, &broker, flags);
        relay.wait_ready(Duration::from_secs(60));
        Stack {
            pg,
            broker,
            client,
            relay,
        }
    }
}
