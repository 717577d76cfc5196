//! Progress of long work over rows or records: how many are done, how fast,
//! how long is left. On a terminal it is a bar on stderr, redrawn in place;
//! anywhere else, a log line every few seconds, so that a job's log tells
//! the same story.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use tracing::info;

/// How often the log line comes when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(5);
/// How often the bar is redrawn.
const DRAW_EVERY: Duration = Duration::from_millis(200);
const BAR_WIDTH: usize = 30;

/// Where the figures stand now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub done: u64,
    pub total: u64,
    pub per_second: f64,
    /// None until there is a rate to extrapolate from.
    pub left: Option<Duration>,
}

impl Rate {
    /// `done` of `total` after `elapsed`.
    pub fn of(done: u64, total: u64, elapsed: Duration) -> Self {
        let seconds = elapsed.as_secs_f64();
        let per_second = if seconds > 0.0 {
            done as f64 / seconds
        } else {
            0.0
        };
        let left = (per_second > 0.0)
            .then(|| Duration::from_secs_f64(total.saturating_sub(done) as f64 / per_second));
        Rate {
            done,
            total,
            per_second,
            left,
        }
    }

    /// `450000/1000000 rows (45%), 52000 rows/s, 11s left`
    pub fn text(&self, unit: &str) -> String {
        let percent = if self.total > 0 {
            self.done as f64 * 100.0 / self.total as f64
        } else {
            100.0
        };
        let left = match self.left {
            Some(left) => format!("{} left", humantime::format_duration(round(left))),
            None => "time left unknown".to_string(),
        };
        format!(
            "{}/{} {unit} ({percent:.0}%), {:.0} {unit}/s, {left}",
            self.done, self.total, self.per_second
        )
    }
}

fn round(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

/// Reports progress of one piece of work.
pub struct Meter {
    what: String,
    unit: &'static str,
    total: u64,
    started: Instant,
    last_shown: Option<Instant>,
    terminal: bool,
}

impl Meter {
    /// `what` names the work in log lines (e.g. "replay"); `unit` counts it.
    pub fn new(what: &str, unit: &'static str, total: u64) -> Self {
        Meter {
            what: what.to_string(),
            unit,
            total,
            started: Instant::now(),
            last_shown: None,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// A meter that only logs, whatever stderr is (a long-running service).
    pub fn logging(what: &str, unit: &'static str, total: u64) -> Self {
        Meter {
            terminal: false,
            ..Meter::new(what, unit, total)
        }
    }

    pub fn rate(&self, done: u64) -> Rate {
        Rate::of(done, self.total, self.started.elapsed())
    }

    /// Shows `done` if it is time to; returns the rate either way.
    pub fn update(&mut self, done: u64) -> Rate {
        let rate = self.rate(done);
        let every = if self.terminal { DRAW_EVERY } else { LOG_EVERY };
        if self.last_shown.is_none_or(|at| at.elapsed() >= every) {
            self.last_shown = Some(Instant::now());
            self.show(&rate);
        }
        rate
    }

    /// Shows the final figures and ends the bar's line.
    pub fn finish(&mut self, done: u64) -> Rate {
        let rate = self.rate(done);
        self.show(&rate);
        if self.terminal {
            eprintln!();
        }
        rate
    }

    fn show(&self, rate: &Rate) {
        if self.terminal {
            let filled = match rate.total {
                0 => BAR_WIDTH,
                total => (rate.done.min(total) as usize * BAR_WIDTH) / total as usize,
            };
            let bar = format!("{}{}", "#".repeat(filled), "-".repeat(BAR_WIDTH - filled));
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r\x1b[2K{} [{bar}] {}",
                self.what,
                rate.text(self.unit)
            );
            let _ = err.flush();
        } else {
            info!(
                done = rate.done,
                total = rate.total,
                per_second = rate.per_second.round() as u64,
                seconds_left = rate.left.map(|l| l.as_secs()),
                "{} progress: {}",
                self.what,
                rate.text(self.unit)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_left_is_what_remains_at_the_rate_so_far() {
        let rate = Rate::of(250, 1000, Duration::from_secs(5));
        assert_eq!(rate.per_second, 50.0);
        assert_eq!(rate.left, Some(Duration::from_secs(15)));
        assert_eq!(
            rate.text("rows"),
            "250/1000 rows (25%), 50 rows/s, 15s left"
        );
        assert_eq!(Rate::of(0, 10, Duration::ZERO).left, None);
    }
}
