//! The watchdog's loop on scripted readings and paused tokio time
//! (`start_paused`): tokio moves the clock straight to the next timer
//! whenever every task waits, so five minutes of checks take no time and a
//! busy machine cannot make a test late. What the tests read is what an
//! operator sees: the log, /metrics and the error that stops walrelay.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

use super::*;
use crate::error::{Result, StopCause};

const INTERVAL: Duration = Duration::from_secs(10);

/// What the scripted slot answers.
#[derive(Clone)]
enum SlotAnswer {
    Reads(Box<SlotReport>),
    /// The query never returns, as from a frozen backend.
    Hangs,
    /// There is no slot, and reading what the state table remembers of it
    /// never returns.
    AbsentAndItsRecordHangs,
}

/// What the publication check answers.
#[derive(Clone, Copy, PartialEq)]
enum SourceAnswer {
    Intact,
    /// The outbox changed under the relay: walrelay must stop.
    Changed,
}

/// The scripted Postgres: the test changes it as the clock moves, and it
/// records when the watchdog came.
struct Script {
    reachable: bool,
    /// Connecting never finishes, as with a server whose kernel accepts
    /// the connection while Postgres never answers its startup.
    connect_hangs: bool,
    source: SourceAnswer,
    slot: SlotAnswer,
    /// When each check tried to connect.
    checks: Vec<Instant>,
    /// When each check read the slot.
    readings: Vec<Instant>,
}

#[derive(Clone)]
struct Scripted(Arc<Mutex<Script>>);

impl Readings for Scripted {
    async fn connect(&mut self) -> Result<()> {
        let hangs = {
            let mut script = self.0.lock().unwrap();
            script.checks.push(Instant::now());
            if !script.reachable {
                return Err(Error::transient("connection refused"));
            }
            script.connect_hangs
        };
        if hangs {
            std::future::pending::<()>().await;
        }
        Ok(())
    }

    fn disconnect(&mut self) {}

    async fn check_source(&mut self, _: &Metrics, _: Option<&Webhook>) -> Result<()> {
        match self.0.lock().unwrap().source {
            SourceAnswer::Intact => Ok(()),
            SourceAnswer::Changed => Err(Error::permanent(
                "walrelay stopped because the outbox is no longer published as it was",
            )
            .with_cause(StopCause::OutboxChanged)),
        }
    }

    async fn slot(&mut self) -> Result<Option<SlotReport>> {
        let answer = {
            let mut script = self.0.lock().unwrap();
            script.readings.push(Instant::now());
            script.slot.clone()
        };
        match answer {
            SlotAnswer::Reads(report) => Ok(Some(*report)),
            SlotAnswer::Hangs => std::future::pending().await,
            SlotAnswer::AbsentAndItsRecordHangs => Ok(None),
        }
    }

    async fn slot_absent(&mut self, _: &Metrics, _: Option<&Webhook>) {
        std::future::pending::<()>().await;
    }

    fn slot_present(&mut self, _: &Metrics) {}
}

/// The log as an operator reads it, in lines.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A watchdog running on scripted readings, with a healthy relay beside it.
struct Watchdog {
    script: Scripted,
    metrics: Metrics,
    fatal: mpsc::Receiver<Error>,
    log: Log,
    task: JoinHandle<()>,
    started: Instant,
    // The test's runtime has one thread: the task logs through this too.
    _logging: tracing::subscriber::DefaultGuard,
}

impl Watchdog {
    fn start() -> Self {
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .finish();
        let logging = tracing::subscriber::set_default(subscriber);
        let script = Scripted(Arc::new(Mutex::new(Script {
            reachable: true,
            connect_hangs: false,
            source: SourceAnswer::Intact,
            slot: SlotAnswer::Reads(Box::new(slot(10))),
            checks: Vec::new(),
            readings: Vec::new(),
        })));
        let metrics = Metrics::new();
        metrics.set_streaming(true);
        let (fatal_tx, fatal) = mpsc::channel(1);
        let settings = WatchdogSettings {
            interval: INTERVAL,
            ..settings()
        };
        let task = tokio::spawn(watch(script.clone(), settings, metrics.clone(), fatal_tx));
        Watchdog {
            script,
            metrics,
            fatal,
            log,
            task,
            started: Instant::now(),
            _logging: logging,
        }
    }

    fn set(&self, change: impl FnOnce(&mut Script)) {
        change(&mut self.script.0.lock().unwrap());
    }

    fn lag(&self, bytes: i64) {
        self.set(|s| s.slot = SlotAnswer::Reads(Box::new(slot(bytes))));
    }

    /// Lets the clock run until `at` after the start.
    async fn until(&self, at: Duration) {
        sleep((self.started + at).saturating_duration_since(Instant::now())).await;
    }

    fn since_start(&self, times: &[Instant]) -> Vec<Duration> {
        times.iter().map(|t| *t - self.started).collect()
    }

    fn checks(&self) -> Vec<Duration> {
        self.since_start(&self.script.0.lock().unwrap().checks)
    }

    fn readings(&self) -> Vec<Duration> {
        self.since_start(&self.script.0.lock().unwrap().readings)
    }

    /// The log lines that say `what`.
    fn logged(&self, what: &str) -> Vec<String> {
        let text = String::from_utf8(self.log.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .filter(|line| line.contains(what))
            .map(str::to_string)
            .collect()
    }

    /// Whether /metrics shows the slot's figures.
    fn shows_the_slot(&self) -> bool {
        self.metrics.render().contains("walrelay_slot_lag_bytes ")
    }

    /// `walrelay_slot_lag_alert_level` in /metrics.
    fn alert_level(&self) -> String {
        let text = self.metrics.render();
        let line = text
            .lines()
            .find(|l| l.starts_with("walrelay_slot_lag_alert_level "))
            .expect("the alert level is always served");
        line.rsplit(' ').next().unwrap().to_string()
    }
}

fn secs(all: &[u64]) -> Vec<Duration> {
    all.iter().map(|s| Duration::from_secs(*s)).collect()
}

#[tokio::test(start_paused = true)]
async fn the_first_check_waits_one_interval_and_then_one_comes_per_interval() {
    let w = Watchdog::start();
    w.until(Duration::from_millis(9_900)).await;
    assert!(w.checks().is_empty(), "checked before one interval");
    assert!(!w.shows_the_slot(), "slot figures before the first reading");
    w.until(Duration::from_secs(35)).await;
    assert_eq!(w.readings(), secs(&[10, 20, 30]));
    assert!(w.shows_the_slot());
}

#[tokio::test(start_paused = true)]
async fn a_postgres_out_of_reach_is_tried_once_per_interval_never_in_a_busy_loop() {
    let w = Watchdog::start();
    w.set(|s| s.reachable = false);
    w.until(Duration::from_secs(65)).await;
    assert_eq!(w.checks(), secs(&[10, 20, 30, 40, 50, 60]));
    assert!(w.readings().is_empty());
}

#[tokio::test(start_paused = true)]
async fn being_blind_is_said_once_a_minute_not_at_every_check_and_the_slot_figures_leave_metrics() {
    let w = Watchdog::start();
    w.until(Duration::from_secs(15)).await;
    assert!(w.shows_the_slot());
    w.set(|s| s.reachable = false);
    w.until(Duration::from_secs(315)).await;
    // 30 checks failed, at 20 s, 30 s, ... 310 s; said at 20, 80, 140, 200, 260.
    assert_eq!(w.checks().len(), 31);
    let said = w.logged("watchdog cannot connect to Postgres");
    assert_eq!(said.len(), 5, "{said:#?}");
    assert!(said[0].contains("WARN") && said[0].contains("connection refused"));
    assert!(
        !w.shows_the_slot(),
        "frozen slot figures served while blind"
    );
    w.set(|s| s.reachable = true);
    w.until(Duration::from_secs(345)).await;
    assert_eq!(w.logged("watchdog connected to Postgres again").len(), 1);
    assert!(w.shows_the_slot());
    assert_eq!(w.logged("watchdog cannot connect to Postgres").len(), 5);
}

#[tokio::test(start_paused = true)]
async fn each_change_of_alert_level_is_announced_once_at_the_check_that_sees_it() {
    let w = Watchdog::start();
    w.until(Duration::from_secs(15)).await;
    assert_eq!(w.alert_level(), "0");
    w.lag(5_000);
    w.until(Duration::from_millis(19_900)).await;
    assert_eq!(w.logged("slot alert raised"), Vec::<String>::new());
    w.until(Duration::from_secs(25)).await;
    let raised = w.logged("slot alert raised");
    assert_eq!(raised.len(), 1, "{raised:#?}");
    assert!(raised[0].contains("WARN") && raised[0].contains("--lag-warn-bytes"));
    assert_eq!(w.alert_level(), "1");
    w.until(Duration::from_secs(45)).await;
    assert_eq!(
        w.logged("slot alert raised").len(),
        1,
        "said again unchanged"
    );
    w.lag(20_000);
    w.until(Duration::from_secs(55)).await;
    let raised = w.logged("slot alert raised");
    assert_eq!(raised.len(), 2, "{raised:#?}");
    assert!(raised[1].contains("ERROR") && raised[1].contains("--lag-critical-bytes"));
    assert_eq!(w.alert_level(), "2");
    w.lag(10);
    w.until(Duration::from_secs(65)).await;
    let cleared = w.logged("slot alert cleared");
    assert_eq!(cleared.len(), 1, "{cleared:#?}");
    assert!(cleared[0].contains("critical"), "{cleared:#?}");
    assert_eq!(w.alert_level(), "0");
    w.until(Duration::from_secs(95)).await;
    assert_eq!(w.logged("slot alert cleared").len(), 1);
    assert_eq!(w.logged("slot alert raised").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_slot_reading_that_never_answers_is_given_up_after_30_s_and_checks_resume_without_a_burst(
) {
    let w = Watchdog::start();
    w.until(Duration::from_secs(15)).await;
    w.set(|s| s.slot = SlotAnswer::Hangs);
    w.until(Duration::from_secs(45)).await;
    // The reading at 20 s still waits; the next one answers.
    w.lag(10);
    assert_eq!(
        w.logged("watchdog cannot read the slot"),
        Vec::<String>::new()
    );
    w.until(Duration::from_millis(50_100)).await;
    let said = w.logged("watchdog cannot read the slot");
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(said[0].contains("did not answer the watchdog within 30s"));
    w.until(Duration::from_secs(65)).await;
    // The checks missed at 30 s and 40 s are not made up in a burst: one at
    // once, then one per interval from there.
    assert_eq!(w.readings(), secs(&[10, 20, 50, 60]));
    assert!(w.shows_the_slot());
}

#[tokio::test(start_paused = true)]
async fn a_lost_slot_stops_walrelay_at_the_first_check_that_sees_it() {
    let mut w = Watchdog::start();
    let mut lost = slot(20_000);
    lost.wal_status = Some("lost".into());
    lost.confirmed_flush = Some(Lsn(0x16B_3748));
    w.set(|s| s.slot = SlotAnswer::Reads(Box::new(lost)));
    let error = w.fatal.recv().await.expect("the watchdog stops walrelay");
    assert_eq!(w.started.elapsed(), INTERVAL);
    assert_eq!(error.stop_cause(), Some(StopCause::SlotLost));
    assert!(error.report().contains("after LSN 0/16B3748"), "{error:?}");
    assert_eq!(w.alert_level(), "2");
    let raised = w.logged("slot alert raised");
    assert!(
        raised.len() == 1 && raised[0].contains("slot_lost"),
        "{raised:#?}"
    );
    (&mut w.task).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_outbox_changed_under_the_relay_stops_walrelay_and_the_slot_figures_leave_metrics() {
    let mut w = Watchdog::start();
    w.until(Duration::from_secs(15)).await;
    assert!(w.shows_the_slot());
    w.set(|s| s.source = SourceAnswer::Changed);
    let error = w.fatal.recv().await.expect("the watchdog stops walrelay");
    assert_eq!(w.started.elapsed(), 2 * INTERVAL);
    assert_eq!(error.stop_cause(), Some(StopCause::OutboxChanged));
    assert!(
        !w.shows_the_slot(),
        "slot figures frozen after the watchdog stopped"
    );
    (&mut w.task).await.unwrap();
    assert_eq!(w.readings(), secs(&[10]));
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_never_completes_is_given_up_after_30_s_like_a_reading() {
    let w = Watchdog::start();
    w.until(Duration::from_secs(15)).await;
    assert!(w.shows_the_slot());
    // Postgres restarted: the watchdog's connection is gone, and the new
    // one hangs at its startup.
    w.set(|s| s.connect_hangs = true);
    w.until(Duration::from_secs(49)).await;
    assert_eq!(
        w.logged("watchdog cannot connect to Postgres"),
        Vec::<String>::new()
    );
    w.until(Duration::from_secs(60)).await;
    let said = w.logged("watchdog cannot connect to Postgres");
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(said[0].contains("did not answer the watchdog within 30s"));
    assert!(
        !w.shows_the_slot(),
        "frozen slot figures served while blind"
    );
    // The attempt made at once at 50 s hangs too, and is given up at 80 s.
    w.set(|s| s.connect_hangs = false);
    w.until(Duration::from_secs(85)).await;
    assert_eq!(w.logged("watchdog connected to Postgres again").len(), 1);
    assert_eq!(w.checks(), secs(&[10, 20, 50, 80]));
    assert!(w.shows_the_slot());
}

#[tokio::test(start_paused = true)]
async fn a_missing_slot_whose_record_cannot_be_read_holds_the_watchdog_no_longer_than_30_s() {
    let w = Watchdog::start();
    w.until(Duration::from_secs(15)).await;
    w.set(|s| s.slot = SlotAnswer::AbsentAndItsRecordHangs);
    w.until(Duration::from_secs(45)).await;
    assert!(!w.shows_the_slot(), "a missing slot's figures served");
    w.lag(10);
    w.until(Duration::from_secs(55)).await;
    let said = w.logged("watchdog cannot read the slot's record");
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(said[0].contains("did not answer the watchdog within 30s"));
    assert_eq!(w.readings(), secs(&[10, 20, 50]));
    assert!(w.shows_the_slot());
}
