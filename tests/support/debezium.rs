//! Debezium as the oracle: a Kafka Connect standalone worker
//! (`scripts/debezium.sh run`) with Debezium's PostgreSQL connector and the
//! outbox EventRouter, producing to a test's broker, configured by
//! connector .properties files as a user writes them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, Broker, Postgres, TempDir};

/// `scripts/debezium.sh`, which runs Connect from the jars `fetch` cached.
pub fn debezium_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/debezium.sh")
}

/// A connector's options in order, written as a .properties file.
#[derive(Clone, Debug, Default)]
pub struct Properties(pub Vec<(String, String)>);

impl Properties {
    /// The options of a Debezium PostgreSQL connector with the outbox
    /// EventRouter that reads `schema.table` of `pg` through its own
    /// pgoutput slot and publication (`name`), as a user configures one:
    /// no snapshot, the publication for the outbox alone, topics created by
    /// Connect with `partitions` partitions.
    pub fn outbox_connector(pg: &Postgres, name: &str, table: &str, partitions: u32) -> Self {
        let mut p = Properties::default();
        for (key, value) in [
            ("name", name.to_string()),
            (
                "connector.class",
                "io.debezium.connector.postgresql.PostgresConnector".into(),
            ),
            ("tasks.max", "1".into()),
            ("plugin.name", "pgoutput".into()),
            ("database.hostname", "127.0.0.1".into()),
            ("database.port", pg.port.to_string()),
            ("database.user", "postgres".into()),
            // The test cluster trusts local TCP; Debezium wants one all the same.
            ("database.password", "unused".into()),
            ("database.dbname", "postgres".into()),
            ("topic.prefix", name.to_string()),
            ("slot.name", name.to_string()),
            ("publication.name", name.to_string()),
            ("publication.autocreate.mode", "filtered".into()),
            ("table.include.list", table.to_string()),
            ("snapshot.mode", "no_data".into()),
            ("topic.creation.default.partitions", partitions.to_string()),
            ("topic.creation.default.replication.factor", "1".into()),
            ("transforms", "outbox".into()),
            (
                "transforms.outbox.type",
                "io.debezium.transforms.outbox.EventRouter".into(),
            ),
        ] {
            p.set(key, &value);
        }
        p
    }

    /// Sets `key`, in place when it is there already.
    pub fn set(&mut self, key: &str, value: &str) -> &mut Self {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value.to_string(),
            None => self.0.push((key.to_string(), value.to_string())),
        }
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The file's text; `\` and leading blanks in values escaped as
    /// java.util.Properties reads them.
    pub fn text(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={}\n", v.replace('\\', "\\\\")))
            .collect()
    }

    pub fn write(&self, path: &Path) {
        std::fs::write(path, self.text()).unwrap();
    }
}

/// One Kafka Connect worker with the connectors of some .properties files.
pub struct Connect {
    child: Option<Child>,
    dir: TempDir,
    pub rest_port: u16,
    names: Vec<String>,
}

impl Connect {
    /// Starts a worker that produces to `broker` with the connectors
    /// `files` configure, and waits until each connector and its task run.
    pub fn start(broker: &Broker, files: &[PathBuf]) -> Self {
        Self::start_in(None, broker, files)
    }

    /// `start` with the worker's jars and plugins in `home` (scripts/
    /// debezium.sh's WALRELAY_DEBEZIUM_HOME), e.g. with another converter.
    pub fn start_in(home: Option<&Path>, broker: &Broker, files: &[PathBuf]) -> Self {
        let dir = TempDir::new("connect");
        let rest_port = free_port();
        let names = files
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(f).unwrap();
                text.lines()
                    .find_map(|l| l.strip_prefix("name="))
                    .unwrap_or_else(|| panic!("{} has no name=", f.display()))
                    .to_string()
            })
            .collect();
        let log = std::fs::File::create(dir.0.join("connect.log")).unwrap();
        let started = Instant::now();
        // `run` execs the JVM, so the child's pid is the worker's.
        let mut command = Command::new(debezium_script());
        if let Some(home) = home {
            command.env("WALRELAY_DEBEZIUM_HOME", home);
        }
        let child = command
            .arg("run")
            .arg(&dir.0)
            .arg(broker.brokers())
            .arg(rest_port.to_string())
            .args(files)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start Kafka Connect: {e}"));
        let mut connect = Connect {
            child: Some(child),
            dir,
            rest_port,
            names,
        };
        connect.wait_running(Duration::from_secs(120));
        eprintln!(
            "Kafka Connect with {} Debezium connectors running in {:?}",
            connect.names.len(),
            started.elapsed()
        );
        connect
    }

    /// Polls each connector's status on the REST API until it and its task
    /// are RUNNING; fails at once on FAILED, with the trace Connect gives.
    fn wait_running(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for name in self.names.clone() {
            loop {
                let status = self.get(&format!("/connectors/{name}/status"));
                if let Some((200, body)) = &status {
                    assert!(
                        !body.contains("\"FAILED\""),
                        "connector {name} failed: {body}\nConnect's log:\n{}",
                        self.log()
                    );
                    if body.matches("\"state\":\"RUNNING\"").count() >= 2 {
                        break;
                    }
                }
                if let Some(exit) = self.child.as_mut().unwrap().try_wait().unwrap() {
                    self.child = None;
                    panic!("Kafka Connect exited ({exit}); its log:\n{}", self.log());
                }
                assert!(
                    Instant::now() < deadline,
                    "connector {name} did not run in {timeout:?} ({status:?}); Connect's log:\n{}",
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    /// GET a path of the REST API: (status code, body).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        super::http_get(self.rest_port, path)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("connect.log")).unwrap_or_default()
    }

    /// The worker's JVM (`run` execs it), for its CPU time and memory.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }
}

impl Drop for Connect {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            let log = self.log();
            // The end of it: Connect logs every connector's whole configuration.
            let tail: Vec<&str> = log.lines().rev().take(200).collect();
            eprintln!(
                "--- the end of Kafka Connect's log ---\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}
