//! `walrelay check`: a pre-flight that connects with the flags of `run` and
//! prints a checklist, each failure with its fix. It changes nothing: no
//! slot, publication or topic is created.

mod durability;
mod kafka;
mod postgres;
mod registry;
mod standby;
mod state;

use std::fmt::Write as _;

use serde_json::json;

use crate::config::{CheckArgs, Command, Settings};
use crate::error::{AtRisk, Error, Result, StopCause};
use crate::logging::Redactor;
use crate::postgres::lsn::Lsn;
use crate::postgres::state::recovery::describe;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pass,
    Warn,
    Fail,
    /// Not run: it needs something that failed before, or another server version.
    Skip,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

/// One line of the checklist.
#[derive(Debug, Clone)]
pub struct Check {
    /// Stable, for --json consumers: e.g. `postgres.wal_level`.
    pub name: &'static str,
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do about a failure or warning.
    pub fix: Option<String>,
    /// The stop `run` would make on this failure, where events are at
    /// stake: its cause (and so its exit code) and the range at risk.
    pub stop: Option<(StopCause, Option<AtRisk>)>,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Pass,
            detail: detail.into(),
            fix: None,
            stop: None,
        }
    }

    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
            stop: None,
        }
    }

    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
            stop: None,
        }
    }

    fn skip(name: &'static str, detail: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Skip,
            detail: detail.into(),
            fix: None,
            stop: None,
        }
    }

    /// A failure from one of `run`'s own start-up checks, whose message
    /// names the fix (and `Error::fix` apart, where the error knows it).
    fn from_error(name: &'static str, error: &Error) -> Self {
        Check {
            name,
            status: Status::Fail,
            detail: error.report(),
            fix: error.fix().map(str::to_string).or_else(|| {
                // A failure of the moment (a connection, a timeout) has no
                // fix of its own: trying again is it.
                error.is_transient().then(|| {
                    "this looked temporary (the server or the network): run walrelay check \
                     again, and if it fails the same way, check that the server answers"
                        .to_string()
                })
            }),
            stop: error.stop_cause().map(|cause| (cause, error.at_risk())),
        }
    }
}

/// Runs every check, prints the list, and fails when any check failed.
pub async fn run(args: CheckArgs) -> Result<()> {
    let settings = Settings::from_args(&args.run)?;
    let mut checks = postgres::checks(&settings).await;
    checks.extend(kafka::checks(&settings).await);
    checks.extend(registry::checks(&settings).await);
    // The report goes to stdout, past the log's masking: mask it the same
    // way, whatever a check quoted from a server or a client library.
    let redactor = Redactor::new(Command::Check(Box::new(args.clone())).secrets());
    for check in &mut checks {
        check.detail = redactor.redact(std::mem::take(&mut check.detail));
        check.fix = check.fix.take().map(|fix| redactor.redact(fix));
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    if args.json {
        let doc = json!({
            "ok": failed == 0,
            "checks": checks.iter().map(|c| json!({
                "name": c.name,
                "status": c.status.name(),
                "detail": c.detail,
                "fix": c.fix,
                "stop": c.stop.map(|(cause, risk)| json!({
                    "cause": cause.name(),
                    "exit_code": cause.exit_code(),
                    "events_may_be_missing": cause.may_lose_events(),
                    "at_risk": risk.map(|r| json!({
                        "after": Lsn(r.after).to_string(),
                        "through": r.through.map(|l| Lsn(l).to_string()),
                    })),
                })),
            })).collect::<Vec<_>>(),
        });
        crate::outln!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
    } else {
        crate::output::write(format_args!("{}", render(&checks)));
    }
    if failed > 0 {
        let error = Error::permanent(format!(
            "{failed} pre-flight check(s) failed; each names its fix above"
        ));
        // The first stop run would make decides the exit code, as it
        // would decide run's.
        return Err(match checks.iter().find_map(|c| c.stop) {
            Some((cause, _)) => error.with_cause(cause),
            None => error,
        });
    }
    Ok(())
}

fn render(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let mark = match c.status {
            Status::Pass => "ok  ",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        let _ = writeln!(out, "{mark}  {:<34} {}", c.name, c.detail);
        if let Some(fix) = &c.fix {
            let _ = writeln!(out, "      {:<34} fix: {fix}", "");
        }
        if let Some((cause, risk)) = c.stop {
            let risk = match risk {
                Some(r) => format!("events at risk: {}", describe(r)),
                None if cause.may_lose_events() => "events at risk: range unknown".to_string(),
                None => "no events at risk: the slot keeps them".to_string(),
            };
            let _ = writeln!(
                out,
                "      {:<34} run stops: cause {} (exit code {}); {risk}",
                "",
                cause.name(),
                cause.exit_code()
            );
        }
    }
    let count = |s| checks.iter().filter(|c| c.status == s).count();
    let _ = writeln!(
        out,
        "\n{} ok, {} failing, {} warnings, {} skipped",
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Warn),
        count(Status::Skip)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checklist_shows_the_fix_under_a_failure() {
        let text = render(&[
            Check::pass("postgres.wal_level", "logical"),
            Check::fail(
                "postgres.role",
                "no REPLICATION",
                "ALTER ROLE x REPLICATION;",
            ),
        ]);
        assert!(text.contains("ok    postgres.wal_level"), "{text}");
        assert!(text.contains("FAIL  postgres.role"), "{text}");
        assert!(text.contains("fix: ALTER ROLE x REPLICATION;"), "{text}");
        assert!(text.contains("1 ok, 1 failing, 0 warnings, 0 skipped"));
    }

    #[test]
    fn a_failure_run_would_stop_on_names_the_cause_its_exit_code_and_the_range_at_risk() {
        let missing = Error::permanent("slot is missing")
            .with_fix("recreate it")
            .with_cause(StopCause::SlotMissing)
            .with_at_risk(0x2000, None);
        let lost = Error::permanent("slot is lost").with_cause(StopCause::SlotLost);
        let poison = Error::permanent("cannot publish").with_cause(StopCause::Poison);
        let text = render(&[
            Check::from_error("postgres.state", &missing),
            Check::from_error("postgres.slot", &lost),
            Check::from_error("kafka.event", &poison),
        ]);
        for part in [
            "run stops: cause slot_missing (exit code 3); events at risk: after 0/2000 up to now",
            "run stops: cause slot_lost (exit code 3); events at risk: range unknown",
            "run stops: cause poison (exit code 6); no events at risk: the slot keeps them",
        ] {
            assert!(text.contains(part), "{part:?} missing from:\n{text}");
        }
    }
}
