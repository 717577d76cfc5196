//! The errors for an outbox walrelay can no longer read whole, each with the
//! LSN range at risk and the way back: a slot that is missing or lost, an
//! outbox table that was replaced or left the publication, a slot read with
//! other settings. One text per case, for start-up, the watchdog, the apply
//! loop, `check` and `status`.

use super::SlotState;
use crate::error::{self, Error, StopCause};
use crate::postgres::lsn::Lsn;

/// The range at risk as the log and `walrelay check` print it:
/// "after 0/16B3A28 up to now", "after 0/16B3A28 through 0/16C0000".
pub fn describe(risk: error::AtRisk) -> String {
    match risk.through {
        Some(through) => format!("after {} through {}", Lsn(risk.after), Lsn(through)),
        None => format!("after {} up to now", Lsn(risk.after)),
    }
}

/// The same error with the range at risk, when its start is known.
fn at_risk(error: Error, after: Option<Lsn>, through: Option<Lsn>) -> Error {
    match after {
        Some(after) => error.with_at_risk(after.0, through.map(|l| l.0)),
        None => error,
    }
}

/// The permanent error for a slot that existed and is gone.
pub fn missing_slot_error(slot: &str, state: &SlotState) -> Error {
    let since = state
        .created
        .as_ref()
        .map_or_else(String::new, |(lsn, at)| {
            format!(" since {at} (created at LSN {lsn})")
        });
    let error = Error::permanent(format!(
        "replication slot {slot:?} is missing, but walrelay has streamed from it{since}. It was \
         dropped, or Postgres failed over to a server without a copy of it. Events committed \
         after LSN {} may not have been published, and walrelay will not create a new slot on \
         its own: a new slot starts at the current WAL position. {}",
        state.last_delivered(),
        recovery_steps(slot)
    ))
    .with_fix(recovery_steps(slot))
    .with_cause(StopCause::SlotMissing);
    at_risk(error, state.delivered_lsn(), None)
}

/// The permanent error for a slot Postgres invalidated (wal_status = lost).
pub fn lost_slot_error(slot: &str, confirmed: Option<Lsn>) -> Error {
    let error = Error::permanent(format!(
        "replication slot {slot:?} is lost (wal_status = lost): Postgres removed WAL that held \
         events walrelay had not yet confirmed (after LSN {}), so they can no longer be read; \
         set max_slot_wal_keep_size large enough to ride out an outage. {}",
        confirmed.map_or_else(|| "unknown".to_string(), |l| l.to_string()),
        recovery_steps(slot)
    ))
    .with_fix(recovery_steps(slot))
    .with_cause(StopCause::SlotLost);
    at_risk(error, confirmed, None)
}

/// One text for every way a slot is lost.
pub fn recovery_steps(slot: &str) -> String {
    format!(
        "To recover: find the events committed after that LSN (in the outbox table if its rows \
         are kept, else from the business tables), start walrelay once with \
         --recreate-missing-slot (after dropping a lost slot with \
         SELECT pg_drop_replication_slot('{slot}');), then publish those events again with \
         their original ids so consumers dedupe what they already saw (walrelay replay \
         --where \"created_at >= '…'\"). \
         See docs/operations.md, \"The slot is lost\" and \"Publishing events again\""
    )
}

/// Where the events at risk lie, for the messages below.
#[derive(Debug, Clone)]
pub struct AtRisk {
    /// The last position known delivered (and when, if known).
    pub from: String,
    /// The current WAL position, or the transaction where walrelay stopped.
    pub to: String,
    /// The same range as positions, for the error's [`error::AtRisk`]:
    /// after this one, through the second (`None`: until mended).
    pub range: Option<(Lsn, Option<Lsn>)>,
}

/// The permanent error for an outbox table that is no longer the one
/// walrelay read: `what` says how (replaced, left the publication).
pub fn outbox_changed_error(what: &str, risk: &AtRisk) -> Error {
    let error = Error::permanent(format!(
        "{what}. Rows written to the table while it was not published never reached the slot, \
         so events committed between LSN {} and {} may be missing from Kafka, and walrelay \
         stopped instead of streaming on. Publish the rows of that range again (walrelay replay \
         --where \"created_at >= '…'\"; same event ids, so consumers dedupe what they saw: \
         docs/operations.md, \"Publishing events again\"), \
         then start walrelay once with --accept-outbox-change to record the table as it is now",
        risk.from, risk.to
    ))
    .with_fix(format!(
        "publish the events committed between LSN {} and {} again (walrelay replay), then \
         start walrelay once with --accept-outbox-change",
        risk.from, risk.to
    ))
    .with_cause(StopCause::OutboxChanged);
    match risk.range {
        Some((after, through)) => at_risk(error, Some(after), through),
        None => error,
    }
}

/// A start-up refusal about how the outbox is published (left the
/// publication, publication gone, no inserts), with the range at risk when
/// walrelay has read the outbox before: from where it last found it as
/// recorded until now.
pub fn unpublished_since(error: Error, state: Option<&SlotState>, wal_now: Lsn) -> Error {
    match state {
        Some(state) if !error.is_transient() && !state.outbox.is_empty() => {
            at_risk(error, state.verified_lsn(), Some(wal_now))
                .with_note(&format!(
                    ". walrelay last found the outbox published as recorded at LSN {}: events \
             committed since then, up to {wal_now}, may never have reached the slot. Once it is \
             fixed, publish them again and start walrelay once with --accept-outbox-change \
             (docs/operations.md, \"The outbox table was replaced or left the publication\")",
                    state.last_verified()
                ))
                .with_cause(StopCause::OutboxChanged)
        }
        _ => error,
    }
}

/// The permanent error for an instance whose settings differ from the
/// ones recorded for the slot.
pub fn config_changed_error(slot: &str, differences: &[String]) -> Error {
    Error::permanent(format!(
        "replication slot {slot:?} is read with other settings than this walrelay's: {}. Two \
         configurations on one slot would let the older one confirm past events only the newer \
         one publishes (or the other way round), so this walrelay does not stream. For a \
         deliberate change, start the new configuration once with --accept-config-change: the \
         instances with the old one then stop (docs/operations.md, \"Changing what walrelay \
         publishes\")",
        differences.join("; ")
    ))
    .with_fix(
        "for a deliberate change, start the new configuration once with \
         --accept-config-change; otherwise start this walrelay with the recorded settings",
    )
    .with_cause(StopCause::SettingsChanged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::state::Delivered;

    #[test]
    fn the_missing_slot_error_names_the_slot_the_lsn_and_the_flag() {
        let state = SlotState {
            slot: "orders".into(),
            created: Some((Lsn(0x100), "2026-12-01T00:00:00Z".into())),
            delivered: Some(Delivered {
                lsn: Lsn(0x2000),
                server: None,
                at: "2026-12-02T00:00:00Z".into(),
            }),
            verified: None,
            outbox: Vec::new(),
            settings: None,
            kept_before: None,
        };
        let error = missing_slot_error("orders", &state);
        let text = error.to_string();
        assert!(text.contains("\"orders\" is missing"), "{text}");
        assert!(text.contains("after LSN 0/2000"), "{text}");
        assert!(text.contains("--recreate-missing-slot"), "{text}");
        // The same range as data, open-ended: the slot is gone until mended.
        let risk = error.at_risk().expect("a range at risk");
        assert_eq!(describe(risk), "after 0/2000 up to now");
    }

    #[test]
    fn a_lost_slot_of_unknown_position_names_no_range_but_may_lose_events() {
        let error = lost_slot_error("orders", None);
        assert_eq!(error.at_risk(), None);
        assert!(error.stop_cause().is_some_and(StopCause::may_lose_events));
    }

    #[test]
    fn a_changed_outbox_names_the_range_and_the_flag() {
        let risk = AtRisk {
            from: "0/16B3748".into(),
            to: "0/1800000".into(),
            range: Some((Lsn(0x16B3748), Some(Lsn(0x1800000)))),
        };
        let error = outbox_changed_error("the outbox table public.outbox was replaced", &risk);
        assert_eq!(
            error.at_risk().map(describe).as_deref(),
            Some("after 0/16B3748 through 0/1800000")
        );
        let text = error.to_string();
        for part in [
            "between LSN 0/16B3748 and 0/1800000",
            "--accept-outbox-change",
        ] {
            assert!(text.contains(part), "{part:?} missing from {text}");
        }
    }
}
