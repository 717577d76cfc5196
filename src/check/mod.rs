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
use crate::error::{Error, Result};
use crate::logging::Redactor;

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
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Pass,
            detail: detail.into(),
            fix: None,
        }
    }

    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn skip(name: &'static str, detail: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Skip,
            detail: detail.into(),
            fix: None,
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
            })).collect::<Vec<_>>(),
        });
        crate::outln!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
    } else {
        crate::output::write(format_args!("{}", render(&checks)));
    }
    if failed > 0 {
        return Err(Error::permanent(format!(
            "{failed} pre-flight check(s) failed; each names its fix above"
        )));
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
}
