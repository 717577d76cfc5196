//! walrelay's memory of its slots, kept in the database itself.
//!
//! A missing slot means two very different things: a first start (create
//! it), or a slot that existed and is gone (dropped by hand, or a failover
//! to a server that has no copy of it). Creating a new slot in the second
//! case starts at the current WAL position and skips every event committed
//! in between, without a word. So walrelay records each slot it streams
//! from in a line of the publication's comment: the catalog is copied to
//! physical standbys and survives a failover, unlike anything on local disk.
//! The line also carries the last confirmed LSN (refreshed by the watchdog),
//! so a loss can name where the gap starts.

use std::time::SystemTime;

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;
use tracing::warn;

use super::lsn::Lsn;
use super::names::{quote_ident, quote_literal};
use super::sql_error;
use crate::error::{Error, Result};

const PREFIX: &str = "walrelay-slot ";

/// What the database remembers of one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotHistory {
    pub slot: String,
    pub created_lsn: Lsn,
    pub created_at: String,
    /// The last confirmed LSN walrelay recorded, and when.
    pub confirmed: Option<(Lsn, String)>,
}

impl SlotHistory {
    pub fn new(slot: &str, created_lsn: Lsn) -> Self {
        SlotHistory {
            slot: slot.to_string(),
            created_lsn,
            created_at: now_text(),
            confirmed: None,
        }
    }

    fn line(&self) -> String {
        let mut line = format!(
            "{PREFIX}{} created_lsn={} created_at={}",
            self.slot, self.created_lsn, self.created_at
        );
        if let Some((lsn, at)) = &self.confirmed {
            line.push_str(&format!(" confirmed_lsn={lsn} confirmed_at={at}"));
        }
        line
    }

    fn parse(line: &str) -> Option<Self> {
        let mut words = line.strip_prefix(PREFIX)?.split(' ');
        let slot = words.next()?.to_string();
        let mut fields = std::collections::HashMap::new();
        for word in words {
            let (k, v) = word.split_once('=')?;
            fields.insert(k, v);
        }
        let confirmed = match (fields.get("confirmed_lsn"), fields.get("confirmed_at")) {
            (Some(lsn), Some(at)) => Some((lsn.parse().ok()?, at.to_string())),
            _ => None,
        };
        Some(SlotHistory {
            slot,
            created_lsn: fields.get("created_lsn")?.parse().ok()?,
            created_at: fields.get("created_at")?.to_string(),
            confirmed,
        })
    }

    /// Where the events that can no longer be read begin.
    pub fn last_confirmed(&self) -> String {
        match &self.confirmed {
            Some((lsn, at)) => format!("{lsn} (recorded at {at})"),
            None => format!(
                "{} (the slot's creation at {})",
                self.created_lsn, self.created_at
            ),
        }
    }

    /// Sets the confirmed LSN; true if it moved.
    pub fn confirm(&mut self, lsn: Lsn) -> bool {
        if self.confirmed.as_ref().is_some_and(|(l, _)| *l >= lsn) {
            return false;
        }
        self.confirmed = Some((lsn, now_text()));
        true
    }
}

/// The publication's comment, if the publication exists.
async fn comment(client: &Client, publication: &str) -> Result<Option<String>> {
    let row = client
        .query_opt(
            "SELECT obj_description(oid, 'pg_publication') FROM pg_catalog.pg_publication \
             WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|e| sql_error("cannot read the publication's comment", e))?;
    Ok(row.and_then(|r| r.get(0)))
}

/// What the database remembers of `slot`, if anything.
pub async fn read(client: &Client, publication: &str, slot: &str) -> Result<Option<SlotHistory>> {
    let text = comment(client, publication).await?.unwrap_or_default();
    Ok(text
        .lines()
        .filter_map(SlotHistory::parse)
        .find(|h| h.slot == slot))
}

/// Records `history`, keeping the rest of the comment. Never fails the
/// caller: without the right to comment on the publication (it is owned by
/// another role) walrelay warns with the statement its owner should run; a
/// concurrent writer (two replicas starting at once) is told the same way,
/// and the next start records it.
pub async fn write(client: &Client, publication: &str, history: &SlotHistory) {
    let old = match comment(client, publication).await {
        Ok(old) => old.unwrap_or_default(),
        Err(e) => {
            warn!(error = %e.report(), "cannot read the publication's comment");
            return;
        }
    };
    let mut lines: Vec<String> = old
        .lines()
        .filter(|l| SlotHistory::parse(l).is_none_or(|h| h.slot != history.slot))
        .map(str::to_string)
        .collect();
    lines.push(history.line());
    let sql = format!(
        "COMMENT ON PUBLICATION {} IS {}",
        quote_ident(publication),
        quote_literal(&lines.join("\n"))
    );
    match client.batch_execute(&sql).await {
        Ok(()) => {}
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => warn!(
            publication,
            slot = %history.slot,
            "walrelay may not comment on the publication, so a slot lost in a failover \
             could be mistaken for a first start; let the publication's owner run: {sql}"
        ),
        Err(e) => warn!(
            publication,
            slot = %history.slot,
            error = %e,
            "cannot record the slot in the publication's comment; the next start tries again"
        ),
    }
}

/// Records the slot's confirmed LSN in its history, as Postgres has it (never
/// more than it has, so a recorded gap never starts too late).
pub async fn record_confirmed(client: &Client, publication: &str, slot: &str) -> Result<()> {
    let Some(mut history) = read(client, publication, slot).await? else {
        return Ok(());
    };
    let report = super::slot::read(client, slot).await?;
    let Some(confirmed) = report.and_then(|r| r.confirmed_flush) else {
        return Ok(());
    };
    if history.confirm(confirmed) {
        write(client, publication, &history).await;
    }
    Ok(())
}

/// The permanent error for a slot that existed and is gone.
pub fn missing_slot_error(slot: &str, history: &SlotHistory) -> Error {
    Error::permanent(format!(
        "replication slot {slot:?} is missing, but walrelay has streamed from it since {} \
         (created at LSN {}). It was dropped, or Postgres failed over to a server without a copy \
         of it. Events committed after LSN {} may not have been published, and walrelay will not \
         create a new slot on its own: a new slot starts at the current WAL position. {}",
        history.created_at,
        history.created_lsn,
        history.last_confirmed(),
        recovery_steps(slot)
    ))
}

/// The permanent error for a slot Postgres invalidated (wal_status = lost).
pub fn lost_slot_error(slot: &str, confirmed: Option<Lsn>) -> Error {
    Error::permanent(format!(
        "replication slot {slot:?} is lost (wal_status = lost): Postgres removed WAL that held \
         events walrelay had not yet confirmed (after LSN {}), so they can no longer be read; \
         set max_slot_wal_keep_size large enough to ride out an outage. {}",
        confirmed.map_or_else(|| "unknown".to_string(), |l| l.to_string()),
        recovery_steps(slot)
    ))
}

/// One text for every way a slot is lost.
pub fn recovery_steps(slot: &str) -> String {
    format!(
        "To recover: find the events committed after that LSN (in the outbox table if its rows \
         are kept, else from the business tables), start walrelay once with \
         --recreate-missing-slot (after dropping a lost slot with \
         SELECT pg_drop_replication_slot('{slot}');), then publish those events again with \
         their original ids so consumers dedupe what they already saw. \
         See docs/operations.md, \"The slot is lost\""
    )
}

fn now_text() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_line_reads_back_as_written() {
        let mut h = SlotHistory::new("walrelay", Lsn(0x16B3748));
        assert_eq!(SlotHistory::parse(&h.line()), Some(h.clone()));
        assert!(h.confirm(Lsn(0x1700000)));
        assert!(!h.confirm(Lsn(0x1600000)), "never moves back");
        assert_eq!(SlotHistory::parse(&h.line()), Some(h.clone()));
        assert!(h.last_confirmed().starts_with("0/1700000 (recorded at "));
    }

    #[test]
    fn other_comment_lines_are_not_histories() {
        assert_eq!(SlotHistory::parse("owned by the payments team"), None);
        assert_eq!(SlotHistory::parse("walrelay-slot x created_lsn=zz"), None);
    }

    #[test]
    fn the_missing_slot_error_names_the_slot_the_lsn_and_the_flag() {
        let mut h = SlotHistory::new("orders", Lsn(0x100));
        h.confirm(Lsn(0x2000));
        let text = missing_slot_error("orders", &h).to_string();
        assert!(text.contains("\"orders\" is missing"), "{text}");
        assert!(text.contains("after LSN 0/2000"), "{text}");
        assert!(text.contains("--recreate-missing-slot"), "{text}");
    }
}
