//! The flags of the commands that publish rows already in the outbox:
//! `walrelay replay` (and, with it, every flag of `run`).

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

    /// The order rows are sent in, as SQL ORDER BY columns, e.g. "created_at, id" [default: the primary key].
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
