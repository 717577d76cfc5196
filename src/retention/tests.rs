//! Retention's task on scripted tables and paused tokio time
//! (`start_paused`): when passes run, how often a waiting plan looks
//! again, what a failure costs, and when a plan is carried out. tokio
//! moves the clock straight to the next timer whenever every task waits,
//! so an hour of passes takes no time. What a pass does in Postgres is
//! tests/retention.rs's, on a real server.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::sleep;

use super::*;

const INTERVAL: Duration = Duration::from_secs(60);

/// What the scripted start answers, in turn (then it starts).
#[derive(Clone, Copy)]
enum StartAnswer {
    /// Postgres cannot be reached yet (a transient error).
    Unreachable,
    /// A setting retention cannot work with (a permanent error).
    Refused,
}

/// What the scripted pick answers, in turn (then nothing is old enough).
#[derive(Clone, Copy)]
enum PickAnswer {
    /// A plan whose snapshot read this `pg_current_wal_insert_lsn()`.
    Plan { l0: u64, full: bool },
    /// The pass fails (a transient error).
    Fails,
}

/// The scripted tables: the test changes them as the clock moves, and
/// they record what the task asked of them, and when.
#[derive(Default)]
struct Script {
    starts: VecDeque<StartAnswer>,
    picks: VecDeque<PickAnswer>,
    confirmed: Option<u64>,
    guard: bool,
    oldest_row_age: f64,
    calls: Vec<(&'static str, Instant)>,
    /// The `l0` of each plan carried out.
    carried_out: Vec<u64>,
}

#[derive(Clone)]
struct Scripted(Arc<Mutex<Script>>);

impl Scripted {
    fn call(&self, what: &'static str) -> std::sync::MutexGuard<'_, Script> {
        let mut script = self.0.lock().unwrap();
        script.calls.push((what, Instant::now()));
        script
    }
}

impl Tables for Scripted {
    async fn start(&mut self) -> Result<()> {
        match self.call("start").starts.pop_front() {
            None => Ok(()),
            Some(StartAnswer::Unreachable) => Err(Error::transient("connection refused")),
            Some(StartAnswer::Refused) => Err(Error::permanent(
                "column \"created_at\" of outbox is not a timestamptz",
            )),
        }
    }

    async fn make_ahead(&mut self) -> Result<()> {
        drop(self.call("make ahead"));
        Ok(())
    }

    async fn pick(&mut self, _: Duration) -> Result<Option<Plan>> {
        match self.call("pick").picks.pop_front() {
            None => Ok(None),
            Some(PickAnswer::Fails) => Err(Error::transient("the connection was closed")),
            Some(PickAnswer::Plan { l0, full }) => Ok(Some(Plan {
                l0: Lsn(l0),
                made: Instant::now(),
                rows: Vec::new(),
                partitions: Vec::new(),
                full,
            })),
        }
    }

    async fn confirmed(&mut self) -> Result<Option<Lsn>> {
        Ok(self.call("confirmed").confirmed.map(Lsn))
    }

    async fn guard_installed(&mut self) -> Result<bool> {
        Ok(self.call("guard").guard)
    }

    async fn carry_out(&mut self, plan: &Plan) -> Result<()> {
        self.call("carry out").carried_out.push(plan.l0.0);
        Ok(())
    }

    async fn oldest_row_age(&mut self) -> Result<f64> {
        Ok(self.call("oldest row age").oldest_row_age)
    }

    fn disconnect(&mut self) {
        drop(self.call("disconnect"));
    }
}

/// Retention running on scripted tables.
struct Retention {
    script: Scripted,
    metrics: Metrics,
    fatal: mpsc::Receiver<Error>,
    task: JoinHandle<()>,
    started: Instant,
}

fn settings() -> RetentionSettings {
    RetentionSettings {
        keep: Some(Duration::from_secs(3600)),
        batch_size: 100,
        interval: INTERVAL,
        time_column: "created_at".into(),
        partitions_ahead: 0,
    }
}

impl Retention {
    fn start(settings: RetentionSettings, script: Script) -> Self {
        let script = Scripted(Arc::new(Mutex::new(Script {
            guard: true,
            ..script
        })));
        let metrics = Metrics::new();
        let m = RetentionMetrics::register(&metrics);
        let (fatal_tx, fatal) = mpsc::channel(1);
        let task = tokio::spawn(retain(
            script.clone(),
            settings,
            metrics.clone(),
            m,
            fatal_tx,
        ));
        Retention {
            script,
            metrics,
            fatal,
            task,
            started: Instant::now(),
        }
    }

    /// Its first pass picks a plan whose snapshot read L0 = 100, with the
    /// slot confirmed up to `confirmed` and the outbox found intact by the
    /// watchdog at `verified`; `full` when it took as many rows as a plan
    /// takes.
    fn with_a_plan_at_l0_100(confirmed: Lsn, verified: Lsn, full: bool) -> Self {
        let r = Retention::start(
            settings(),
            Script {
                picks: [PickAnswer::Plan { l0: 100, full }].into(),
                confirmed: Some(confirmed.0),
                ..Script::default()
            },
        );
        r.metrics.set_outbox_verified(verified.0);
        r
    }

    fn set(&self, change: impl FnOnce(&mut Script)) {
        change(&mut self.script.0.lock().unwrap());
    }

    /// Lets the clock run until `at` after the start.
    async fn until(&self, at: Duration) {
        sleep((self.started + at).saturating_duration_since(Instant::now())).await;
    }

    /// When the task asked for `what`, counted from the start.
    fn calls(&self, what: &str) -> Vec<Duration> {
        let script = self.script.0.lock().unwrap();
        script
            .calls
            .iter()
            .filter(|(call, _)| *call == what)
            .map(|(_, at)| *at - self.started)
            .collect()
    }

    fn carried_out(&self) -> Vec<u64> {
        self.script.0.lock().unwrap().carried_out.clone()
    }

    /// A metric as /metrics serves it.
    fn metric(&self, name: &str) -> f64 {
        let text = self.metrics.render();
        let line = text
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("{name} is not served:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }
}

fn secs(all: &[u64]) -> Vec<Duration> {
    all.iter().map(|s| Duration::from_secs(*s)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_pass_runs_at_start_and_then_once_per_retention_interval() {
    let r = Retention::start(
        settings(),
        Script {
            oldest_row_age: 42.0,
            ..Script::default()
        },
    );
    r.until(Duration::from_secs(190)).await;
    assert_eq!(r.calls("start"), secs(&[0]));
    assert_eq!(r.calls("pick"), secs(&[0, 60, 120, 180]));
    assert_eq!(r.calls("oldest row age"), secs(&[0, 60, 120, 180]));
    assert_eq!(r.metric("walrelay_retention_oldest_row_age_seconds"), 42.0);
    assert_eq!(r.metric("walrelay_retention_errors_total"), 0.0);
}

#[tokio::test(start_paused = true)]
async fn partitions_ahead_alone_are_made_once_per_interval_and_no_row_is_picked() {
    let r = Retention::start(
        RetentionSettings {
            keep: None,
            partitions_ahead: 3,
            ..settings()
        },
        Script::default(),
    );
    r.until(Duration::from_secs(130)).await;
    assert_eq!(r.calls("make ahead"), secs(&[0, 60, 120]));
    assert!(r.calls("pick").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_failed_pass_is_counted_and_tried_again_an_interval_later_not_at_once() {
    let r = Retention::start(
        settings(),
        Script {
            picks: [PickAnswer::Fails].into(),
            ..Script::default()
        },
    );
    r.until(Duration::from_secs(59)).await;
    assert_eq!(r.calls("pick"), secs(&[0]));
    assert_eq!(
        r.calls("disconnect"),
        secs(&[0]),
        "a new connection next time"
    );
    assert_eq!(r.metric("walrelay_retention_errors_total"), 1.0);
    r.until(Duration::from_secs(130)).await;
    assert_eq!(r.calls("pick"), secs(&[0, 60, 120]));
    assert_eq!(r.metric("walrelay_retention_errors_total"), 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_start_that_cannot_reach_postgres_is_tried_again_each_interval_until_it_can() {
    let r = Retention::start(
        settings(),
        Script {
            starts: [StartAnswer::Unreachable, StartAnswer::Unreachable].into(),
            ..Script::default()
        },
    );
    r.until(Duration::from_secs(130)).await;
    assert_eq!(r.calls("start"), secs(&[0, 60, 120]));
    assert_eq!(r.calls("pick"), secs(&[120]), "a pass before the start");
    assert_eq!(r.metric("walrelay_retention_errors_total"), 2.0);
}

#[tokio::test(start_paused = true)]
async fn a_start_refused_for_good_stops_walrelay_naming_outbox_retention() {
    let mut r = Retention::start(
        settings(),
        Script {
            starts: [StartAnswer::Refused].into(),
            ..Script::default()
        },
    );
    let error = r.fatal.recv().await.expect("retention stops walrelay");
    assert!(!error.is_transient());
    assert!(
        error
            .report()
            .starts_with("outbox retention: column \"created_at\" of outbox is not a timestamptz"),
        "{error:?}"
    );
    (&mut r.task).await.unwrap();
    assert_eq!(r.started.elapsed(), Duration::ZERO);
    assert!(r.calls("pick").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_plan_waits_for_its_events_to_be_confirmed_looking_once_a_second_and_says_how_long() {
    let r = Retention::with_a_plan_at_l0_100(Lsn(50), Lsn(100), false);
    r.until(Duration::from_millis(5_500)).await;
    assert_eq!(r.calls("confirmed"), secs(&[0, 1, 2, 3, 4, 5]));
    assert!(r.carried_out().is_empty(), "deleted before confirmed");
    assert_eq!(r.metric("walrelay_retention_waiting_seconds"), 5.0);
    r.set(|s| s.confirmed = Some(100));
    r.until(Duration::from_secs(7)).await;
    assert_eq!(r.calls("carry out"), secs(&[6]));
    assert_eq!(r.carried_out(), [100]);
    assert_eq!(r.metric("walrelay_retention_waiting_seconds"), 0.0);
    r.until(Duration::from_secs(70)).await;
    // Nothing waits: no more looks until the next pass.
    assert_eq!(r.calls("confirmed").len(), 7);
    assert_eq!(r.calls("pick"), secs(&[0, 60]));
}

#[tokio::test(start_paused = true)]
async fn a_plan_the_slot_confirmed_waits_until_the_watchdog_found_the_outbox_intact_past_it() {
    let r = Retention::with_a_plan_at_l0_100(Lsn(200), Lsn(99), false);
    r.until(Duration::from_millis(3_500)).await;
    assert!(
        r.carried_out().is_empty(),
        "deleted before the outbox was verified"
    );
    r.metrics.set_outbox_verified(100);
    r.until(Duration::from_millis(4_500)).await;
    assert_eq!(r.calls("carry out"), secs(&[4]));
}

#[tokio::test(start_paused = true)]
async fn a_full_plan_is_followed_by_the_next_plan_at_once_not_an_interval_later() {
    let r = Retention::with_a_plan_at_l0_100(Lsn(100), Lsn(100), true);
    r.until(Duration::from_secs(70)).await;
    assert_eq!(r.carried_out(), [100]);
    assert_eq!(r.calls("pick"), secs(&[0, 0, 60]));
}

#[tokio::test(start_paused = true)]
async fn a_plan_is_not_carried_out_once_the_guard_is_gone_and_the_pass_fails_loudly() {
    let r = Retention::with_a_plan_at_l0_100(Lsn(100), Lsn(100), false);
    r.set(|s| s.guard = false);
    r.until(Duration::from_secs(30)).await;
    assert!(r.carried_out().is_empty(), "deleted without the guard");
    assert_eq!(r.metric("walrelay_retention_errors_total"), 1.0);
    r.set(|s| s.guard = true);
    r.until(Duration::from_secs(70)).await;
    // The plan kept waiting, and goes at the pass after the failed one.
    assert_eq!(r.calls("carry out"), secs(&[60]));
    assert_eq!(r.calls("pick"), secs(&[0, 60]));
}
