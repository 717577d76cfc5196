//! walrelay's one error type.
//!
//! Every error is either *transient* (the relay reconnects with backoff and
//! resumes from the slot's confirmed position) or *permanent* (the relay stops
//! with a message that says what to fix). The source chain is kept so the
//! final message shows the underlying cause.

use std::error::Error as StdError;
use std::fmt;

type BoxError = Box<dyn StdError + Send + Sync + 'static>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Worth retrying: a lost connection, a broker that is down, a slot held by another process.
    Transient,
    /// Retrying cannot help: bad configuration, a missing table, an event Kafka rejects for good.
    Permanent,
    /// Another process holds the slot: wait as a standby, polling at a steady pace.
    Standby,
}

/// Why walrelay stopped for good where the data is at stake: a test, and
/// anything that must act on the stop, reads the cause rather than the
/// message. The exit code, the stop's log line, `/readyz`'s reason, the
/// held gauges and `walrelay check`'s report all derive from it. Each
/// error that carries one names the fix, and where events may be missing
/// from Kafka the WAL range at risk ([`AtRisk`]).
/// docs/delivery-guarantees.md lists them with the test that pins each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// The slot walrelay streamed from no longer exists (`WalrelaySlotMissing`).
    SlotMissing,
    /// Postgres invalidated the slot, `wal_status = lost` (`WalrelaySlotWalUnreserved`).
    SlotLost,
    /// The outbox table walrelay accepted was replaced, or left the
    /// publication, or is no longer published as it was.
    OutboxChanged,
    /// Another configuration reads the slot (`--accept-config-change`).
    SettingsChanged,
    /// An event cannot be published and `--on-poison halt` stops on it.
    Poison,
    /// Another producer took the slot's `transactional.id` (exactly once).
    Fenced,
    /// Kafka lost transactions it had reported committed (exactly once).
    KafkaLostCommit,
}

impl StopCause {
    /// Whether walrelay waits to be stopped rather than exit, so that
    /// `/metrics` keeps showing why and its alert can fire
    /// (`relay::refused`): the stops that lose events unless an operator
    /// acts, a slot that is gone or an outbox that changed, at start or
    /// while streaming.
    pub fn holds(self) -> bool {
        matches!(
            self,
            StopCause::SlotMissing | StopCause::SlotLost | StopCause::OutboxChanged
        )
    }

    /// Whether events may be missing from Kafka: the slot or Kafka no
    /// longer holds them all. The other stops keep theirs in the slot.
    pub fn may_lose_events(self) -> bool {
        matches!(
            self,
            StopCause::SlotMissing
                | StopCause::SlotLost
                | StopCause::OutboxChanged
                | StopCause::KafkaLostCommit
        )
    }

    /// The name in the stop's log line (`cause=`).
    pub fn name(self) -> &'static str {
        match self {
            StopCause::SlotMissing => "slot_missing",
            StopCause::SlotLost => "slot_lost",
            StopCause::OutboxChanged => "outbox_changed",
            StopCause::SettingsChanged => "settings_changed",
            StopCause::Poison => "poison",
            StopCause::Fenced => "fenced",
            StopCause::KafkaLostCommit => "kafka_lost_commit",
        }
    }

    /// walrelay's exit code for the stop, so that a supervisor can tell
    /// the causes apart without reading the log (systemd's
    /// `RestartPreventExitStatus=`, a Job's `podFailurePolicy`). 1 is any
    /// other error, 2 a command line clap refused.
    pub fn exit_code(self) -> u8 {
        match self {
            StopCause::SlotMissing | StopCause::SlotLost => 3,
            StopCause::OutboxChanged => 4,
            StopCause::SettingsChanged => 5,
            StopCause::Poison => 6,
            StopCause::Fenced => 7,
            StopCause::KafkaLostCommit => 8,
        }
    }
}

/// The WAL range whose events may be missing from Kafka after a stop: the
/// events of the transactions that committed after `after`, up to
/// `through` (`None`: up to now, or until the cause is mended). Positions
/// are raw LSNs, which `postgres::lsn::Lsn` prints as Postgres does; this
/// module sits below `postgres` and cannot name it.
///
/// A stop that keeps its events in the slot (a poison halt, a fence,
/// another configuration on the slot) has none: the slot is not confirmed
/// past them, so nothing is at risk, only delayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtRisk {
    pub after: u64,
    pub through: Option<u64>,
}

pub struct Error {
    kind: Kind,
    /// Set for the stops whose cause decides more than the exit.
    cause: Option<StopCause>,
    /// Where events may be missing, for the stops that know it.
    at_risk: Option<AtRisk>,
    message: String,
    /// What fixes it, apart from the message, for `walrelay check`'s `fix`.
    fix: Option<String>,
    source: Option<BoxError>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Error {
            kind,
            cause: None,
            at_risk: None,
            message: message.into(),
            fix: None,
            source: None,
        }
    }

    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(Kind::Permanent, message)
    }

    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(Kind::Transient, message)
    }

    /// A permanent refusal that says what is wrong, then what fixes it:
    /// "{problem}: {fix}" in the log, and the fix apart for `walrelay check`.
    pub fn refusal(problem: impl std::fmt::Display, fix: impl Into<String>) -> Self {
        let fix = fix.into();
        Self::permanent(format!("{problem}: {fix}")).with_fix(fix)
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The same error naming its fix apart (`walrelay check` shows it as
    /// the check's `fix`); the message should say it too, for the log.
    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// The same error with its stop cause.
    pub fn with_cause(mut self, cause: StopCause) -> Self {
        self.cause = Some(cause);
        self
    }

    pub fn stop_cause(&self) -> Option<StopCause> {
        self.cause
    }

    /// The same error naming the WAL range whose events may be missing.
    pub fn with_at_risk(mut self, after: u64, through: Option<u64>) -> Self {
        self.at_risk = Some(AtRisk { after, through });
        self
    }

    pub fn at_risk(&self) -> Option<AtRisk> {
        self.at_risk
    }

    /// What fixes it, when the error knows.
    pub fn fix(&self) -> Option<&str> {
        self.fix.as_deref()
    }

    /// The same error with a sentence more (the range at risk, say).
    pub fn with_note(mut self, note: &str) -> Self {
        self.message.push_str(note);
        self
    }

    /// Worth another attempt (a standby waits too).
    pub fn is_transient(&self) -> bool {
        self.kind != Kind::Permanent
    }

    /// The message followed by every cause, on one line.
    pub fn report(&self) -> String {
        let mut out = self.message.clone();
        let mut cause = self
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static));
        while let Some(e) = cause {
            let text = e.to_string();
            if !out.contains(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            cause = e.source();
        }
        out
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} error: {}", self.kind, self.report())
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_includes_the_source_chain_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let err = Error::transient("cannot reach Postgres at localhost:5432").with_source(io);
        assert_eq!(
            err.report(),
            "cannot reach Postgres at localhost:5432: connection refused"
        );
        assert!(err.is_transient());
    }

    #[test]
    fn each_stop_cause_has_a_name_and_an_exit_code_apart_from_any_other_error() {
        let all = [
            StopCause::SlotMissing,
            StopCause::SlotLost,
            StopCause::OutboxChanged,
            StopCause::SettingsChanged,
            StopCause::Poison,
            StopCause::Fenced,
            StopCause::KafkaLostCommit,
        ];
        let names: std::collections::HashSet<_> = all.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), all.len());
        // 1 is any other error and 2 clap's usage error.
        assert!(all.iter().all(|c| c.exit_code() >= 3));
        let codes: std::collections::HashSet<_> = all.iter().map(|c| c.exit_code()).collect();
        // A missing and a lost slot share one: the same runbook.
        assert_eq!(codes.len(), all.len() - 1);
    }
}
