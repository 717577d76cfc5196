//! `walrelay status`: the slot's state at a glance, for people on call.

use crate::config::StatusArgs;
use crate::error::{Error, Result};
use crate::postgres::publication;
use crate::postgres::slot::{self, SlotReport};
use crate::postgres::state::recovery::{lost_slot_error, missing_slot_error};
use crate::postgres::state::snapshot::SnapshotState;
use crate::postgres::state::StateTable;
use crate::postgres::{describe_target, setup, snapshot_lock, PgTarget};
use crate::watchdog::{human_bytes, safe_wal_text};

/// Prints the report; returns an error (non-zero exit) when the slot is missing or lost.
pub async fn run(args: StatusArgs) -> Result<()> {
    let pg = args.conn.validate(&args.aws)?;
    let client = setup::connect(&pg).await?;
    let slot_name = &args.conn.slot;
    let report = slot::read(&client, slot_name).await?;
    let state_table = StateTable(args.conn.state_table.clone());
    let state = state_table
        .peek(&client, &args.conn.publication, slot_name)
        .await?;
    let snapshot = state_table.peek_snapshot(&client, slot_name).await?;
    let remembered = state.as_ref().filter(|s| s.created.is_some());
    let tables = publication::tables(&client, &args.conn.publication).await?;
    let publication_exists = tables.is_some();
    let tables = tables.unwrap_or_default();

    if args.json {
        let lsn_at = |v: Option<&(crate::postgres::lsn::Lsn, String)>| {
            v.map(|(lsn, at)| serde_json::json!({"lsn": lsn.to_string(), "at": at}))
        };
        let doc = serde_json::json!({
            "database": describe_target(&pg.config),
            "slot": report.as_ref().map(SlotReport::to_json),
            "state": state.as_ref().map(|s| serde_json::json!({
                "table": args.conn.state_table.to_string(),
                "created": lsn_at(s.created.as_ref()),
                "delivered": s.delivered.as_ref().map(|d| serde_json::json!({
                    "lsn": d.lsn.to_string(),
                    "at": d.at,
                    "system_id": d.server.as_ref().map(|s| s.system_id.clone()),
                    "timeline": d.server.as_ref().map(|s| s.timeline),
                })),
                "verified": lsn_at(s.verified.as_ref()),
                "outbox": s.outbox,
                "settings": s.settings,
                "snapshot": snapshot,
            })),
            "publication": {
                "name": args.conn.publication,
                "exists": publication_exists,
                "tables": tables,
            },
        });
        crate::outln!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
    } else {
        print_table(&pg, &args, report.as_ref(), publication_exists, &tables);
        if let Some(s) = remembered {
            let (lsn, at) = s.created.as_ref().expect("filtered on created");
            crate::outln!(
                "history: walrelay has streamed from this slot since {at} (created at LSN \
                 {lsn}; last delivered position {}; outbox last found intact at {})",
                s.last_delivered(),
                s.last_verified()
            );
        }
        if let Some(snap) = &snapshot {
            // Under way, or abandoned: the snapshot lock's holder tells. Not
            // "at the slot's creation": a start that finds a snapshot
            // unfinished publishes the rows the condition selects then.
            let taker = match snap.state {
                SnapshotState::Taking => snapshot_lock::holder(&client, slot_name).await?,
                SnapshotState::Done => None,
            };
            crate::outln!(
                "snapshot: {} (--snapshot-where {:?}): {} of {} rows published, streaming \
                 from the slot's consistent point {}",
                match (&snap.state, taker) {
                    (SnapshotState::Taking, Some(taker)) => {
                        format!("being published by a walrelay (lock held by {taker})")
                    }
                    (SnapshotState::Taking, None) => "begun, not finished: the next start \
                         publishes the rows it selects then, before streaming"
                        .to_string(),
                    (SnapshotState::Done, _) => "published before streaming began".to_string(),
                },
                snap.predicate,
                snap.published,
                snap.rows,
                snap.consistent_point.as_deref().unwrap_or("-")
            );
        }
    }

    match (report, remembered) {
        (None, Some(state)) => Err(missing_slot_error(slot_name, state)),
        (None, None) => Err(Error::permanent(format!(
            "replication slot {slot_name:?} does not exist; walrelay run creates it on its \
             first start"
        ))),
        (Some(r), _) if r.wal_status.as_deref() == Some("lost") => {
            Err(lost_slot_error(slot_name, r.confirmed_flush))
        }
        (Some(_), _) => Ok(()),
    }
}

fn print_table(
    pg: &PgTarget,
    args: &StatusArgs,
    report: Option<&SlotReport>,
    publication_exists: bool,
    tables: &[String],
) {
    let mut rows: Vec<(&str, String)> = vec![("database", describe_target(&pg.config))];
    match report {
        None => rows.push(("slot", format!("{} (missing)", args.conn.slot))),
        Some(r) => {
            rows.push(("slot", r.name.clone()));
            rows.push(("plugin", r.plugin.clone().unwrap_or_default()));
            rows.push((
                "active",
                match (r.active, r.active_pid) {
                    (true, Some(pid)) => format!("yes (pid {pid})"),
                    (true, None) => "yes".into(),
                    (false, _) => "no: nothing streams from this slot".into(),
                },
            ));
            let lsn = |l: Option<crate::postgres::lsn::Lsn>| {
                l.map(|l| l.to_string()).unwrap_or_else(|| "-".into())
            };
            rows.push(("confirmed_flush_lsn", lsn(r.confirmed_flush)));
            rows.push(("restart_lsn", lsn(r.restart)));
            rows.push(("current WAL", r.current_wal.to_string()));
            rows.push(("lag", human_bytes(r.lag_bytes.max(0) as u64)));
            rows.push(("retained WAL", human_bytes(r.retained_bytes.max(0) as u64)));
            rows.push((
                "wal_status",
                r.wal_status.clone().unwrap_or_else(|| "-".into()),
            ));
            rows.push(("safe_wal_size", safe_wal_text(r)));
        }
    }
    rows.push((
        "publication",
        if publication_exists {
            format!(
                "{} ({})",
                args.conn.publication,
                if tables.is_empty() {
                    "no tables".into()
                } else {
                    tables.join(", ")
                }
            )
        } else {
            format!("{} (missing)", args.conn.publication)
        },
    ));
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in rows {
        crate::outln!("{key:<width$}  {value}");
    }
}
