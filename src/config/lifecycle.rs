//! The flags of the commands that work with rows already in the outbox:
//! `walrelay replay` and `walrelay audit`, each with every flag of `run`.

use clap::Args;

use super::RunArgs;

#[derive(Args, Clone)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub replay: ReplayFlags,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Which rows `walrelay replay` sends, and how.
#[derive(Args, Clone)]
#[command(next_help_heading = "Replay")]
pub struct ReplayFlags {
    /// The rows to publish again: a SQL condition on the outbox table, e.g. "created_at >= now() - interval '2 hours'" or "id IN ('…', '…')".
    #[arg(long = "where", env = "WALRELAY_REPLAY_WHERE", value_name = "SQL")]
    pub predicate: String,

    /// The order rows are sent in, as SQL ORDER BY columns, e.g. "seq". It must keep each key's events in the order they were written: its first column past the key column a sequence-filled integer (identity, serial) or a timestamptz DEFAULT clock_timestamp(), ascending; anything else is refused with the fix. Default: such a column (the primary key when it is one).
    #[arg(long, env = "WALRELAY_REPLAY_ORDER_BY", value_name = "COLUMNS")]
    pub order_by: Option<String>,

    /// Print each record that would be sent (and each row that would be poison); send nothing.
    #[arg(long, env = "WALRELAY_REPLAY_DRY_RUN")]
    pub dry_run: bool,

    /// Send at most this many rows a second [default: no limit].
    #[arg(long, env = "WALRELAY_REPLAY_MAX_RATE", value_name = "N")]
    pub max_rate: Option<u32>,

    /// Print the plan, the records of --dry-run and the result as JSON, one object a line.
    #[arg(long, env = "WALRELAY_REPLAY_JSON")]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct AuditArgs {
    #[command(flatten)]
    pub audit: AuditFlags,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Which rows `walrelay audit` checks, and how.
#[derive(Args, Clone)]
#[command(next_help_heading = "Audit")]
pub struct AuditFlags {
    /// The window's start: a time Postgres reads as timestamptz ("2026-12-01 10:00+00"), or a duration back from now ("2h", "7days").
    #[arg(long, env = "WALRELAY_AUDIT_SINCE", value_name = "TIME|DURATION")]
    pub since: String,

    /// The window's end (excluded), as a time [default: now].
    #[arg(long, env = "WALRELAY_AUDIT_UNTIL", value_name = "TIME")]
    pub until: Option<String>,

    /// The outbox column that places a row in the window.
    #[arg(long, env = "WALRELAY_AUDIT_TIME_COLUMN", default_value = "created_at")]
    pub time_column: String,

    /// How long before its rows' earliest time each topic is read from: for clock skew, and record timestamps that are not commit times.
    #[arg(long, env = "WALRELAY_AUDIT_MARGIN", default_value = "5m", value_parser = super::parse_duration)]
    pub margin: std::time::Duration,

    /// Print the window, each missing event and the result as JSON, one object a line.
    #[arg(long, env = "WALRELAY_AUDIT_JSON")]
    pub json: bool,
}
