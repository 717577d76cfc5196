//! A throwaway Postgres cluster: initdb in a temp dir, a free port,
//! wal_level=logical. Started through the `postgres` user when run as root,
//! because the server refuses to run as root.

use std::path::{Path, PathBuf};
use std::process::Command;

use tokio_postgres::{Client, NoTls};

use super::{free_port, TempDir};

pub struct Postgres {
    pub port: u16,
    pub(super) dir: TempDir,
    pub(super) bin: PathBuf,
    pub(super) running: bool,
}

/// The major version of the server binaries the tests use (15, 17, …).
pub fn major_version() -> u32 {
    let out = Command::new(bin_dir().join("postgres"))
        .arg("--version")
        .output()
        .expect("cannot run postgres --version");
    // "postgres (PostgreSQL) 17.10"
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .last()
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the version from {text:?}"))
}

pub(super) fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WALRELAY_PG_BIN") {
        return dir.into();
    }
    for major in ["18", "17", "16", "15", "14"] {
        let dir = PathBuf::from(format!("/usr/lib/postgresql/{major}/bin"));
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    panic!(
        "no Postgres server binaries found: install the postgresql package or set WALRELAY_PG_BIN"
    );
}

pub(super) fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

impl Postgres {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a cluster with extra postgresql.conf lines (`name = value`).
    pub fn start_with(settings: &[&str]) -> Self {
        Self::start_full(settings, "trust")
    }

    /// A cluster that accepts TCP connections only over TLS, with a server
    /// certificate for `localhost` signed by a CA the test makes. Returns the
    /// cluster and the CA's PEM file.
    pub fn start_with_tls() -> (Self, PathBuf) {
        let mut pg = Self::start_full(&[], "trust");
        pg.stop("fast");
        let data = pg.data_dir();
        let certs = pg.dir.0.join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        super::localhost_certificates(&certs);
        for file in ["server.crt", "server.key"] {
            std::fs::copy(certs.join(file), data.join(file)).unwrap();
        }
        let mut conf = std::fs::read_to_string(data.join("postgresql.auto.conf")).unwrap();
        conf.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        std::fs::write(data.join("postgresql.auto.conf"), conf).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
        )
        .unwrap();
        if is_root() {
            run(Command::new("chown").args(["-R", "postgres"]).arg(&data));
        }
        run(Command::new("chmod")
            .arg("600")
            .arg(data.join("server.key")));
        pg.start_server();
        (pg, certs.join("ca.pem"))
    }

    /// A second CA, which did not sign the server's certificate.
    pub fn other_ca(&self) -> PathBuf {
        let certs = self.dir.0.join("certs");
        run(Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "other.key",
                "-out",
                "other.pem",
                "-days",
                "2",
                "-subj",
                "/CN=someone else",
            ])
            .current_dir(&certs));
        certs.join("other.pem")
    }

    /// A cluster whose TCP connections need a password (`scram-sha-256` or
    /// `md5`); the test's own clients use the Unix socket, which trusts.
    pub fn start_with_host_auth(method: &str) -> Self {
        Self::start_full(&[], method)
    }

    fn start_full(settings: &[&str], host_auth: &str) -> Self {
        let dir = TempDir::new("pg");
        let bin = bin_dir();
        if is_root() {
            run(Command::new("chown").args(["-R", "postgres"]).arg(&dir.0));
        }
        let data = dir.0.join("data");
        run(pg_command(&bin, "initdb")
            .args([
                "-U",
                "postgres",
                "--auth-local=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ])
            .arg(format!("--auth-host={host_auth}"))
            .arg("-D")
            .arg(&data));
        let mut pg = Postgres {
            port: free_port(),
            dir,
            bin,
            running: false,
        };
        let mut conf = String::from(
            "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n\
             fsync = off\nsynchronous_commit = on\nlisten_addresses = '127.0.0.1'\n\
             wal_sender_timeout = '60s'\n",
        );
        for s in settings {
            conf.push_str(s);
            conf.push('\n');
        }
        std::fs::write(data.join("postgresql.auto.conf"), conf).unwrap();
        pg.start_server();
        pg
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.0.join("data")
    }

    pub fn start_server(&mut self) {
        let log = self.dir.0.join("postgres.log");
        run(pg_command(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(&log)
            .arg("-o")
            .arg(format!("-p {} -k {}", self.port, self.dir.0.display()))
            .args(["-w", "start"]));
        self.running = true;
    }

    /// `pg_ctl stop -m MODE` (fast or immediate).
    pub fn stop(&mut self, mode: &str) {
        run(pg_command(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", mode, "-w", "stop"]));
        self.running = false;
    }

    pub fn restart(&mut self, mode: &str) {
        self.stop(mode);
        self.start_server();
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The superuser over the Unix socket (trusted whatever the TCP auth).
    pub fn socket_url(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.0.display(),
            self.port
        )
    }

    /// A URL for another role over TCP.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    pub async fn client(&self) -> Client {
        let (client, conn) = tokio_postgres::connect(&self.socket_url(), NoTls)
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }

    /// A client with the default outbox table created.
    pub async fn client_with_outbox(&self) -> Client {
        let client = self.client().await;
        client.batch_execute(super::OUTBOX_SQL).await.unwrap();
        client
    }

    /// sql/walrelay_guard.sql, run by the superuser as a DBA would before
    /// walrelay starts (`--retention` needs it).
    /// From a synchronous helper of a multi-threaded test.
    pub fn install_guard(&self) {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                let client = self.client().await;
                client
                    .batch_execute(include_str!("../../sql/walrelay_guard.sql"))
                    .await
                    .unwrap();
            })
        });
    }

    /// The postmaster's process id, from postmaster.pid.
    pub fn postmaster_pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.data_dir().join("postmaster.pid")).unwrap();
        text.lines().next().unwrap().trim().parse().unwrap()
    }

    pub fn bin(&self, tool: &str) -> PathBuf {
        self.bin.join(tool)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("postgres.log")).unwrap_or_default()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if self.running {
            let _ = pg_command(&self.bin, "pg_ctl")
                .arg("-D")
                .arg(self.data_dir())
                .args(["-m", "immediate", "stop"])
                .output();
        }
    }
}

pub(super) fn pg_command(bin: &Path, tool: &str) -> Command {
    if is_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(bin.join(tool));
        cmd
    } else {
        Command::new(bin.join(tool))
    }
}

pub(super) fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An LSN as Postgres prints it (`16/B374D848`), as a number.
pub fn lsn_number(text: &str) -> u64 {
    let (hi, lo) = text
        .split_once('/')
        .unwrap_or_else(|| panic!("not an LSN: {text:?}"));
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// The slot's confirmed_flush_lsn as a number (0 when absent).
pub async fn confirmed_flush_lsn(client: &Client, slot: &str) -> u64 {
    let row = client
        .query_opt(
            "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    row.map(|r| r.get::<_, Option<i64>>(0).unwrap_or(0) as u64)
        .unwrap_or(0)
}

/// Whether the slot would still deliver a change whose row holds `needle`
/// (an event id): what a halt must leave behind. Peeks, so the slot does
/// not move; the slot must not be in use.
pub async fn slot_still_holds(client: &Client, slot: &str, needle: &str) -> bool {
    client
        .query_one(
            "SELECT count(*) > 0 FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, \
               'proto_version', '1', 'publication_names', 'walrelay') \
             WHERE position(convert_to($2, 'UTF8') IN data) > 0",
            &[&slot, &needle],
        )
        .await
        .unwrap()
        .get(0)
}

/// Drops a slot once its walsender is gone: after walrelay stops (above
/// all after kill -9) the server may hold the slot active for a moment.
pub async fn drop_slot(client: &Client, slot: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let active: Option<bool> = client
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .map(|row| row.get(0));
        match active {
            None => panic!("slot {slot} does not exist"),
            Some(false) => break,
            Some(true) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await
            }
            Some(true) => panic!("slot {slot} is still in use after 30 s"),
        }
    }
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
}

/// Bytes between the current WAL position and the slot's confirmed_flush_lsn.
pub async fn slot_lag(client: &Client, slot: &str) -> i64 {
    client
        .query_one(
            "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0)
}

/// The replication slots and publications of the cluster: what a start of
/// walrelay may create.
pub async fn slots_and_publications(client: &Client) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM pg_replication_slots), \
                    (SELECT count(*) FROM pg_publication)",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}
