//! The docs' runnable blocks, and one bash that runs them as a person types
//! them. A block is runnable when the line before its fence is
//! `<!-- doctest: NAME [background] [caught-up] -->`; `sh` blocks go to
//! bash as they are, `sql` blocks to `psql "$DATABASE_URL"`. Only the
//! addresses are the test's: `db:5432` is the test's Postgres,
//! `kafka-1:9092[,kafka-2:9092]` its broker.
//!
//! - `background`: the block's last command is a `walrelay run` that keeps
//!   running; the next block runs once it is ready (`/readyz`), and a later
//!   background block stops it first (SIGTERM; it must exit 0).
//! - `caught-up`: before the block, the test waits until walrelay has
//!   confirmed everything written so far, as a person's pace between two
//!   steps gives it time to (reading a topic right after the INSERT that
//!   makes walrelay create it would race the creation).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::{free_port, Broker, Postgres, TempDir};

/// One runnable block of a doc.
#[derive(Debug, Clone)]
pub struct Block {
    /// `file:line` of its fence, for messages.
    pub place: String,
    pub name: String,
    pub background: bool,
    pub caught_up: bool,
    /// `sh` or `sql`.
    pub lang: String,
    pub text: String,
}

/// The runnable blocks of a doc (a path from the repository's root), in order.
pub fn blocks(doc: &str) -> Vec<Block> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(doc);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let marker = lines[i]
            .trim()
            .strip_prefix("<!-- doctest:")
            .and_then(|rest| rest.strip_suffix("-->"));
        let Some(marker) = marker else {
            i += 1;
            continue;
        };
        let words: Vec<&str> = marker.split_whitespace().collect();
        let fence = lines.get(i + 1).copied().unwrap_or("");
        let indent = fence.len() - fence.trim_start().len();
        let lang = fence
            .trim()
            .strip_prefix("```")
            .unwrap_or_else(|| panic!("{doc}:{}: a doctest marker must precede a fence", i + 1));
        assert!(
            matches!(lang, "sh" | "sql"),
            "{doc}:{}: only sh and sql blocks run, not {lang:?}",
            i + 2
        );
        let mut body = Vec::new();
        let mut j = i + 2;
        while lines[j].trim() != "```" {
            body.push(lines[j].get(indent..).unwrap_or("").to_string());
            j += 1;
        }
        out.push(Block {
            place: format!("{doc}:{}", i + 2),
            name: words[0].to_string(),
            background: words[1..].contains(&"background"),
            caught_up: words[1..].contains(&"caught-up"),
            lang: lang.to_string(),
            text: body.join("\n"),
        });
        i = j + 1;
    }
    out
}

/// A bash session in the repository's root, with walrelay on its PATH,
/// `DATABASE_URL` a superuser's URL of database `app`, and walrelay's
/// metrics on a free port (`WALRELAY_METRICS_ADDR`).
pub struct Shell {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    dir: TempDir,
    pub metrics_port: u16,
    addresses: Vec<(String, String)>,
    /// The `walrelay run` a background block started, and its log.
    background: Option<(u32, PathBuf)>,
    runs: usize,
    /// What ran, for a failure's message.
    transcript: String,
}

/// How long one block may take.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(120);
const DONE: &str = "__doctest_done__";
/// Waits until slot walrelay has confirmed the WAL written so far.
const CAUGHT_UP: &str = r#"target=$(psql -XAtc 'SELECT pg_current_wal_lsn()' "$DATABASE_URL")
until [ "$(psql -XAtc "SELECT confirmed_flush_lsn >= '$target' FROM pg_replication_slots WHERE slot_name = 'walrelay'" "$DATABASE_URL")" = t ]; do sleep 0.1; done"#;

impl Shell {
    pub fn start(pg: &Postgres, broker: &Broker) -> Self {
        let metrics_port = free_port();
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_walrelay"));
        let path = format!(
            "{}:{}",
            bin.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("PATH", path)
            .env(
                "DATABASE_URL",
                format!("postgres://postgres@127.0.0.1:{}/app", pg.port),
            )
            .env("WALRELAY_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"))
            .env_remove("WALRELAY_PG_URL")
            .env_remove("WALRELAY_KAFKA_BROKERS")
            .env_remove("PGPASSWORD")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let (tx, lines) = channel();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        for stream in [
            Box::new(stdout) as Box<dyn std::io::Read + Send>,
            Box::new(stderr),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let brokers = broker.brokers();
        let mut shell = Shell {
            child,
            stdin,
            lines,
            dir: TempDir::new("doctest"),
            metrics_port,
            addresses: vec![
                ("db:5432".into(), format!("127.0.0.1:{}", pg.port)),
                ("kafka-1:9092,kafka-2:9092".into(), brokers.clone()),
                ("kafka-1:9092".into(), brokers),
            ],
            background: None,
            runs: 0,
            transcript: String::new(),
        };
        // A failing command ends the session: a doc that fails as written
        // fails the test.
        shell.run_line("set -euo pipefail");
        shell
    }

    /// Runs the blocks named `name` of `doc`, in order, each as written
    /// (apart from the addresses). Returns what each printed.
    pub fn run_blocks(&mut self, doc: &str, name: &str) -> Vec<String> {
        let blocks: Vec<Block> = blocks(doc).into_iter().filter(|b| b.name == name).collect();
        assert!(!blocks.is_empty(), "{doc} has no doctest {name}");
        blocks.iter().map(|block| self.run_block(block)).collect()
    }

    pub fn run_block(&mut self, block: &Block) -> String {
        let mut text = block.text.clone();
        for (from, to) in &self.addresses {
            text = text.replace(from.as_str(), to);
        }
        if block.caught_up {
            self.run_line(CAUGHT_UP);
        }
        self.transcript
            .push_str(&format!("\n--- {} ---\n{text}\n", block.place));
        let command = match (block.lang.as_str(), block.background) {
            ("sql", _) => format!(
                "psql -X -v ON_ERROR_STOP=1 \"$DATABASE_URL\" <<'__doctest_sql__'\n{text}\n__doctest_sql__"
            ),
            (_, false) => text,
            (_, true) => {
                if let Some(status) = self.stop_background() {
                    assert_eq!(status, 0, "the walrelay before {} failed", block.place);
                }
                self.spawn_background(&text);
                super::wait_ready(self.metrics_port, BLOCK_TIMEOUT, || {
                    format!("{}:\n{}", block.place, self.background_log())
                });
                return String::new();
            }
        };
        self.run_line(&command)
    }

    /// Runs one command line in the session; its output.
    pub fn run_line(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}\necho {DONE}")
            .unwrap_or_else(|e| panic!("the shell is gone ({e}); ran:{}", self.transcript));
        self.stdin.flush().unwrap();
        let deadline = Instant::now() + BLOCK_TIMEOUT;
        let mut out = String::new();
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) if line == DONE => return out,
                Ok(line) => {
                    out.push_str(&line);
                    out.push('\n');
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "{command:?} did not finish; output:\n{out}\nran:{}",
                        self.transcript
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().unwrap();
                    panic!(
                        "the docs' command failed ({status}):\n{command}\noutput:\n{out}\nran:{}\n{}",
                        self.transcript,
                        self.background_log()
                    )
                }
            }
        }
    }

    /// Starts `walrelay run FLAGS` in the background as the test's own
    /// step (not a doc's), without waiting for it to be ready.
    pub fn start_walrelay(&mut self, flags: &str) {
        if let Some(status) = self.stop_background() {
            assert_eq!(status, 0);
        }
        let command = format!("walrelay run {flags}");
        self.transcript
            .push_str(&format!("\n--- the test's own ---\n{command}\n"));
        self.spawn_background(&command);
    }

    /// Runs a command line's last command in the background, its output
    /// into a log of its own.
    fn spawn_background(&mut self, command: &str) {
        self.runs += 1;
        let log = self.dir.0.join(format!("walrelay-{}.log", self.runs));
        let pid_file = self.dir.0.join("pid");
        self.run_line(&format!(
            "{command} >>'{}' 2>&1 &\necho $! >'{}'",
            log.display(),
            pid_file.display()
        ));
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        self.background = Some((pid.trim().parse().unwrap(), log));
    }

    /// Stops the background walrelay with SIGTERM; its exit status.
    pub fn stop_background(&mut self) -> Option<i32> {
        let (pid, _) = self.background.clone()?;
        let out = self.run_line(&format!(
            "kill -TERM {pid}; status=0; wait {pid} || status=$?; echo \"exit $status\""
        ));
        self.background = None;
        let status = out
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("exit "))
            .and_then(|s| s.trim().parse().ok());
        Some(status.unwrap_or_else(|| panic!("no exit status in {out:?}")))
    }

    /// The background walrelay's log so far.
    pub fn background_log(&self) -> String {
        self.background
            .as_ref()
            .and_then(|(_, log)| std::fs::read_to_string(log).ok())
            .unwrap_or_default()
    }

    /// GET a path of walrelay's metrics endpoint: (status, body).
    pub fn http_get(&self, path: &str) -> Option<(u16, String)> {
        super::http_get(self.metrics_port, path)
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        if let Some((pid, _)) = self.background.take() {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- ran ---{}", self.transcript);
        }
    }
}
