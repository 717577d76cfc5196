//! The start-up decision about a slot and its outbox, as a pure function of
//! what the database shows, so that `run` acts on it and `check` prints it
//! and the two cannot disagree.

use super::recovery::{config_changed_error, missing_slot_error, outbox_changed_error, AtRisk};
use super::{OutboxIdentity, SlotState};
use crate::error::Error;
use crate::postgres::lsn::Lsn;

/// What the database shows at start-up.
pub struct Observed<'a> {
    pub slot: &'a str,
    pub stored: Option<&'a SlotState>,
    /// The outbox tables as they are now (none for `--source messages`).
    pub outbox: &'a [OutboxIdentity],
    /// This instance's `Settings::published`.
    pub settings: &'a serde_json::Value,
    pub slot_exists: bool,
    /// `pg_current_wal_lsn()`: where a range at risk ends.
    pub wal_now: Lsn,
}

/// What the operator allowed with flags.
#[derive(Debug, Clone, Copy, Default)]
pub struct Allowed {
    pub outbox_change: bool,
    pub config_change: bool,
    pub recreate_missing_slot: bool,
}

/// What to do with the slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotPlan {
    Reuse,
    /// The first start on this database: create it.
    CreateFirst,
    /// A slot walrelay streamed from is gone, and the flag says to create a
    /// new one: events since `gap_from` cannot be delivered.
    CreateReplacing {
        gap_from: String,
    },
}

/// The decision: what to record, and what to do with the slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub slot: SlotPlan,
    /// Accepted changes, for the log: what the flags let through.
    pub accepted: Vec<String>,
}

/// Decides, or says why walrelay must not stream.
pub fn decide(seen: &Observed<'_>, allowed: Allowed) -> Result<Verdict, Error> {
    let mut accepted: Vec<String> =
        settings_verdict(seen.slot, seen.stored, seen.settings, allowed)?
            .into_iter()
            .collect();
    if let Some(stored) = seen.stored {
        if let Some(what) = outbox_change(&stored.outbox, seen.outbox) {
            if !allowed.outbox_change {
                let risk = AtRisk {
                    from: stored.last_verified(),
                    to: seen.wal_now.to_string(),
                    range: stored
                        .verified_lsn()
                        .map(|after| (after, Some(seen.wal_now))),
                };
                return Err(outbox_changed_error(&what, &risk));
            }
            accepted.push(what);
        }
    }
    let remembered = seen.stored.filter(|s| s.created.is_some());
    let slot = match (seen.slot_exists, remembered) {
        (true, _) => SlotPlan::Reuse,
        (false, None) => SlotPlan::CreateFirst,
        (false, Some(state)) if allowed.recreate_missing_slot => SlotPlan::CreateReplacing {
            gap_from: state.last_delivered(),
        },
        (false, Some(state)) => return Err(missing_slot_error(seen.slot, state)),
    };
    Ok(Verdict { slot, accepted })
}

/// The settings part of the decision, which comes before every other
/// check (a table the new settings add may not be published yet): an
/// error for other settings than the recorded ones, or the accepted change.
pub fn settings_verdict(
    slot: &str,
    stored: Option<&SlotState>,
    settings: &serde_json::Value,
    allowed: Allowed,
) -> Result<Option<String>, Error> {
    let Some(recorded) = stored.and_then(|s| s.settings.as_ref()) else {
        return Ok(None);
    };
    let differences = differences(recorded, settings);
    if differences.is_empty() {
        return Ok(None);
    }
    if !allowed.config_change {
        return Err(config_changed_error(slot, &differences));
    }
    Ok(Some(format!(
        "settings changed: {}",
        differences.join("; ")
    )))
}

/// How the outbox tables differ from the recorded ones, if they do. A
/// table added to or dropped from `--table` is a settings change, not this.
pub fn outbox_change(recorded: &[OutboxIdentity], now: &[OutboxIdentity]) -> Option<String> {
    let changes: Vec<String> = recorded
        .iter()
        .filter_map(|old| {
            let new = now.iter().find(|n| n.table == old.table)?;
            if new.oid != old.oid {
                Some(format!(
                    "the outbox table {} was dropped and recreated (oid {} became {})",
                    old.table, old.oid, new.oid
                ))
            } else if new.membership != old.membership {
                Some(format!(
                    "the outbox table {} left the publication and was added back (its \
                     membership {} became {})",
                    old.table, old.membership, new.membership
                ))
            } else {
                None
            }
        })
        .collect();
    (!changes.is_empty()).then(|| changes.join("; "))
}

/// The recorded settings that differ from this instance's, one line each.
pub fn differences(recorded: &serde_json::Value, now: &serde_json::Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let (old, new) = (
        recorded.as_object().unwrap_or(&empty),
        now.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|key| {
            let (a, b) = (
                old.get(key).unwrap_or(&serde_json::Value::Null),
                new.get(key).unwrap_or(&serde_json::Value::Null),
            );
            (a != b).then(|| format!("{key} is {a} for the slot, {b} here"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn identity(oid: u32, membership: &str) -> OutboxIdentity {
        OutboxIdentity {
            table: "public.outbox".into(),
            oid,
            membership: membership.into(),
            earlier_oids: Vec::new(),
            accepted_through: None,
        }
    }

    fn stored(created: bool, outbox: Vec<OutboxIdentity>) -> SlotState {
        SlotState {
            slot: "walrelay".into(),
            created: created.then(|| (Lsn(0x100), "t0".into())),
            delivered: None,
            verified: Some((Lsn(0x200), "t1".into())),
            outbox,
            settings: Some(json!({"tables": ["public.outbox"], "route_by_field": "event_type"})),
            kept_before: None,
        }
    }

    fn seen<'a>(
        stored: Option<&'a SlotState>,
        outbox: &'a [OutboxIdentity],
        settings: &'a serde_json::Value,
        slot_exists: bool,
    ) -> Observed<'a> {
        Observed {
            slot: "walrelay",
            stored,
            outbox,
            settings,
            slot_exists,
            wal_now: Lsn(0x9000),
        }
    }

    fn same_settings() -> serde_json::Value {
        json!({"tables": ["public.outbox"], "route_by_field": "event_type"})
    }

    #[test]
    fn a_first_start_creates_the_slot_and_a_remembered_one_is_reused() {
        let now = [identity(5, "publication 1 rel 2")];
        let settings = same_settings();
        let verdict = decide(&seen(None, &now, &settings, false), Allowed::default()).unwrap();
        assert_eq!(verdict.slot, SlotPlan::CreateFirst);
        let state = stored(true, now.to_vec());
        let verdict = decide(
            &seen(Some(&state), &now, &settings, true),
            Allowed::default(),
        )
        .unwrap();
        assert_eq!(verdict.slot, SlotPlan::Reuse);
        assert!(verdict.accepted.is_empty());
    }

    #[test]
    fn a_missing_slot_that_was_created_is_a_loss_not_a_first_start() {
        let now = [identity(5, "publication 1 rel 2")];
        let settings = same_settings();
        let state = stored(true, now.to_vec());
        let error = decide(
            &seen(Some(&state), &now, &settings, false),
            Allowed::default(),
        )
        .unwrap_err();
        assert!(error.to_string().contains("is missing"), "{error}");
        let allowed = Allowed {
            recreate_missing_slot: true,
            ..Allowed::default()
        };
        let verdict = decide(&seen(Some(&state), &now, &settings, false), allowed).unwrap();
        assert!(matches!(verdict.slot, SlotPlan::CreateReplacing { .. }));
        // A row written before the slot was ever created is still a first start.
        let never = stored(false, now.to_vec());
        let verdict = decide(
            &seen(Some(&never), &now, &settings, false),
            Allowed::default(),
        )
        .unwrap();
        assert_eq!(verdict.slot, SlotPlan::CreateFirst);
    }

    #[test]
    fn a_replaced_or_readded_table_is_refused_with_the_range_unless_accepted() {
        let settings = same_settings();
        let state = stored(true, vec![identity(5, "publication 1 rel 2")]);
        for now in [
            [identity(6, "publication 1 rel 3")],
            [identity(5, "publication 1 rel 4")],
        ] {
            let error = decide(
                &seen(Some(&state), &now, &settings, true),
                Allowed::default(),
            )
            .unwrap_err();
            let text = error.to_string();
            assert!(
                text.contains("between LSN 0/200 (verified at t1) and 0/9000"),
                "{text}"
            );
            let allowed = Allowed {
                outbox_change: true,
                ..Allowed::default()
            };
            let verdict = decide(&seen(Some(&state), &now, &settings, true), allowed).unwrap();
            assert_eq!(verdict.accepted.len(), 1);
        }
    }

    #[test]
    fn other_settings_on_the_slot_are_refused_naming_the_difference() {
        let now = [identity(5, "publication 1 rel 2")];
        let state = stored(true, now.to_vec());
        let wider =
            json!({"tables": ["public.a", "public.outbox"], "route_by_field": "event_type"});
        let error =
            decide(&seen(Some(&state), &now, &wider, true), Allowed::default()).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(
                r#"tables is ["public.outbox"] for the slot, ["public.a","public.outbox"] here"#
            ),
            "{text}"
        );
        assert!(text.contains("--accept-config-change"), "{text}");
        let allowed = Allowed {
            config_change: true,
            ..Allowed::default()
        };
        assert!(decide(&seen(Some(&state), &now, &wider, true), allowed).is_ok());
    }

    #[test]
    fn each_refused_start_carries_its_stop_cause_and_only_a_gone_slot_or_a_changed_outbox_holds_walrelay_up(
    ) {
        use crate::error::StopCause;
        let now = [identity(5, "publication 1 rel 2")];
        let settings = same_settings();
        let state = stored(true, now.to_vec());
        let refused = |seen: Observed<'_>| decide(&seen, Allowed::default()).unwrap_err();
        let missing = refused(seen(Some(&state), &now, &settings, false));
        assert_eq!(missing.stop_cause(), Some(StopCause::SlotMissing));
        let replaced = [identity(6, "publication 1 rel 3")];
        let changed = refused(seen(Some(&state), &replaced, &settings, true));
        assert_eq!(changed.stop_cause(), Some(StopCause::OutboxChanged));
        let wider =
            json!({"tables": ["public.a", "public.outbox"], "route_by_field": "event_type"});
        let other = refused(seen(Some(&state), &now, &wider, true));
        assert_eq!(other.stop_cause(), Some(StopCause::SettingsChanged));
        assert!(StopCause::SlotMissing.holds() && StopCause::SlotLost.holds());
        assert!(StopCause::OutboxChanged.holds() && !StopCause::SettingsChanged.holds());
    }
}
