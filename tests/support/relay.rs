//! The walrelay binary as a child process, with its log and metrics.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, signal, Broker, Postgres, TempDir};

pub struct Relay {
    child: Option<Child>,
    dir: TempDir,
    pub metrics_port: u16,
    args: Vec<String>,
    /// A command line for bash to run instead of `args`, with walrelay on
    /// its PATH and these variables set.
    shell: Option<(String, Vec<(String, String)>)>,
    /// Variables set for walrelay besides the test's own.
    env: Vec<(String, String)>,
    /// The walrelay binary: this build's, or another one a bench compares.
    program: PathBuf,
}

impl Relay {
    pub fn start(pg: &Postgres, broker: &Broker) -> Self {
        Self::start_with(pg, broker, &[])
    }

    pub fn start_with(pg: &Postgres, broker: &Broker, extra: &[&str]) -> Self {
        Self::start_raw(&pg.url(), &broker.brokers(), extra)
    }

    /// `start_with`, walrelay's environment having `env` besides.
    pub fn start_with_env(
        pg: &Postgres,
        broker: &Broker,
        extra: &[&str],
        env: Vec<(String, String)>,
    ) -> Self {
        Self::launch(&pg.url(), &broker.brokers(), extra, env)
    }

    /// `start_with`, running the walrelay binary at `program` instead of
    /// this build's: the benches weigh an older build against this one
    /// (BENCH_WALRELAY_BIN).
    pub fn start_program(program: &Path, pg: &Postgres, broker: &Broker, extra: &[&str]) -> Self {
        let mut relay = Self::prepare(&pg.url(), &broker.brokers(), extra, Vec::new());
        relay.program = program.to_path_buf();
        relay.spawn();
        relay
    }

    /// Any URL and broker list, for start-up errors.
    pub fn start_raw(pg_url: &str, brokers: &str, extra: &[&str]) -> Self {
        Self::launch(pg_url, brokers, extra, Vec::new())
    }

    /// `start_raw`, walrelay's environment having `env` besides.
    pub fn start_raw_with_env(
        pg_url: &str,
        brokers: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self::launch(pg_url, brokers, extra, env)
    }

    fn launch(pg_url: &str, brokers: &str, extra: &[&str], env: Vec<(String, String)>) -> Self {
        let mut relay = Self::prepare(pg_url, brokers, extra, env);
        relay.spawn();
        relay
    }

    /// `walrelay run` against these, not started yet.
    fn prepare(pg_url: &str, brokers: &str, extra: &[&str], env: Vec<(String, String)>) -> Self {
        let metrics_port = free_port();
        let mut args: Vec<String> = vec![
            "run".into(),
            "--pg-url".into(),
            pg_url.into(),
            "--kafka-brokers".into(),
            brokers.into(),
            "--metrics-addr".into(),
            format!("127.0.0.1:{metrics_port}"),
        ];
        if !extra.contains(&"--startup-timeout") {
            args.extend(["--startup-timeout".into(), "20s".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        Relay {
            child: None,
            dir: TempDir::new("relay"),
            metrics_port,
            args,
            shell: None,
            env,
            program: PathBuf::from(env!("CARGO_BIN_EXE_walrelay")),
        }
    }

    /// A command line as a user pastes it into a shell, e.g. the one
    /// `walrelay migrate-from-debezium` prints: bash runs it with `env`
    /// set, walrelay on its PATH and its metrics on a free port
    /// (WALRELAY_METRICS_ADDR).
    pub fn start_shell(command: &str, env: &[(&str, &str)]) -> Self {
        let metrics_port = free_port();
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.push((
            "WALRELAY_METRICS_ADDR".into(),
            format!("127.0.0.1:{metrics_port}"),
        ));
        let mut relay = Relay {
            child: None,
            dir: TempDir::new("relay"),
            metrics_port,
            args: Vec::new(),
            shell: Some((command.to_string(), env)),
            env: Vec::new(),
            program: PathBuf::from(env!("CARGO_BIN_EXE_walrelay")),
        };
        relay.spawn();
        relay
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let mut command = match &self.shell {
            None => {
                let mut command = Command::new(&self.program);
                command.args(&self.args);
                command
            }
            Some((line, env)) => {
                // exec: the child's pid is walrelay's, so kill9 and signals reach it.
                let mut command = shell(&format!("exec {line}"));
                command.envs(env.iter().map(|(k, v)| (k, v)));
                command
            }
        };
        let child = command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("WALRELAY_LOG", "info,walrelay=debug")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn log_path(&self) -> PathBuf {
        self.dir.0.join("walrelay.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("relay is running").id()
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Starts the same command line again after a kill.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        signal(self.pid(), libc::SIGTERM);
        self.wait(timeout)
            .expect("walrelay did not exit after SIGTERM")
    }

    /// Sends SIGHUP, as a closed terminal or a reload request would.
    pub fn hangup(&self) {
        signal(self.pid(), libc::SIGHUP);
    }

    /// Waits for the process to exit on its own.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut()?;
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for walrelay to stop with a failure, and returns its log.
    pub fn wait_for_failure(&mut self, timeout: Duration) -> String {
        let status = self
            .wait(timeout)
            .unwrap_or_else(|| panic!("walrelay went on; log:\n{}", self.log()));
        assert!(!status.success(), "walrelay exited 0; log:\n{}", self.log());
        self.log()
    }

    /// Waits for a start refused because the slot walrelay streamed from is
    /// missing: walrelay stays up so that /metrics shows it
    /// (walrelay_slot_missing 1, /readyz 503), and exits non-zero when
    /// stopped. Returns its log.
    pub fn wait_for_missing_slot_refusal(&mut self, timeout: Duration) -> String {
        let log = self.wait_for_held_stop(timeout, "walrelay_slot_missing");
        assert!(log.contains("missing"), "{log}");
        log
    }

    /// Waits for a stop that walrelay holds rather than exits on (the
    /// outbox replaced or out of the publication: `outbox_changed`), so
    /// that `/metrics` keeps `gauge` at 1 for the alert on it, and /readyz
    /// at 503. Stops walrelay, which exits non-zero, and returns its log.
    pub fn wait_for_held_stop(&mut self, timeout: Duration, gauge: &str) -> String {
        let deadline = Instant::now() + timeout;
        while !self.log().contains("walrelay does not stream") {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!(
                    "walrelay exited ({status}) instead of waiting; log:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "walrelay never refused to start; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(self.metric(gauge), Some(1.0), "{}", self.log());
        let (status, body) = self.http_get("/readyz").unwrap();
        assert_eq!(status, 503, "{body}");
        assert!(body.starts_with("not streaming"), "{body}");
        let status = self.terminate(timeout);
        // The exit code names the cause (docs/delivery-guarantees.md).
        let code = if gauge == "walrelay_publication_broken" {
            4
        } else {
            3
        };
        assert_eq!(status.code(), Some(code), "log:\n{}", self.log());
        self.log()
    }

    /// GET a path of the metrics endpoint: (status code, body).
    pub fn http_get(&self, path: &str) -> Option<(u16, String)> {
        super::http_get(self.metrics_port, path)
    }

    /// The value of an unlabelled metric, or the sum of a labelled one.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let (_, body) = self.http_get("/metrics")?;
        let values: Vec<f64> = body
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }

    /// The name of every series /metrics serves (its `# TYPE` lines).
    pub fn metric_names(&self) -> std::collections::BTreeSet<String> {
        let (_, body) = self.http_get("/metrics").unwrap_or_default();
        body.lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    pub fn wait_ready(&self, timeout: Duration) {
        super::wait_ready(self.metrics_port, timeout, || self.log());
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!("--- walrelay log ---\n{}", self.log());
        }
    }
}

/// What a one-shot command (`walrelay replay`, `walrelay audit`) left behind.
#[derive(Debug)]
pub struct Finished {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `walrelay SUBCOMMAND` against `pg` and `broker` with `extra` flags,
/// to its end.
pub fn run_command(subcommand: &str, pg: &Postgres, broker: &Broker, extra: &[&str]) -> Finished {
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args([
            subcommand,
            "--pg-url",
            &pg.url(),
            "--kafka-brokers",
            &broker.brokers(),
        ])
        .args(extra)
        .env("WALRELAY_LOG", "info,walrelay=debug")
        .output()
        .unwrap();
    Finished {
        success: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// bash running `line`, with the walrelay under test first on its PATH:
/// a command as a user pastes it.
/// `command` (a walrelay command line against `stack`) piped into
/// `head -1` ends as a Unix filter does when its reader goes: exit 0 or
/// SIGPIPE (141), never a panic.
pub fn assert_ends_quietly_into_head(command: &str, stack: &super::Stack) {
    let out = shell(&format!(
        "{command} | head -1 >/dev/null; echo \"exit ${{PIPESTATUS[0]}}\""
    ))
    .env("WALRELAY_PG_URL", stack.pg.url())
    .env("WALRELAY_KAFKA_BROKERS", stack.broker.brokers())
    .output()
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stdout.contains("exit 0") || stdout.contains("exit 141"),
        "{stdout}\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

pub fn shell(line: &str) -> Command {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_walrelay"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command.arg("-c").arg(line).env("PATH", path);
    command
}
