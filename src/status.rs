//! `walrelay status`: the slot's state at a glance, for people on call.

use crate::config::StatusArgs;
use crate::error::{Error, Result};
use crate::postgres::slot::{self, SlotReport};
use crate::postgres::{describe_target, setup, PgTarget};
use crate::postgres::{publication, slot_history};
use crate::watchdog::human_bytes;

/// Prints the report; returns an error (non-zero exit) when the slot is missing or lost.
pub async fn run(args: StatusArgs) -> Result<()> {
    let pg = args.conn.validate()?;
    let client = setup::connect(&pg).await?;
    let slot_name = &args.conn.slot;
    let report = slot::read(&client, slot_name).await?;
    let history = slot_history::read(&client, &args.conn.publication, slot_name).await?;
    let tables = publication::tables(&client, &args.conn.publication).await?;
    let publication_exists = tables.is_some();
    let tables = tables.unwrap_or_default();

    if args.json {
        let doc = serde_json::json!({
            "database": describe_target(&pg.config),
            "slot": report.as_ref().map(SlotReport::to_json),
            "slot_history": history.as_ref().map(|h| serde_json::json!({
                "created_lsn": h.created_lsn.to_string(),
                "created_at": h.created_at,
                "confirmed_lsn": h.confirmed.as_ref().map(|(lsn, _)| lsn.to_string()),
                "confirmed_at": h.confirmed.as_ref().map(|(_, at)| at.clone()),
            })),
            "publication": {
                "name": args.conn.publication,
                "exists": publication_exists,
                "tables": tables,
            },
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
    } else {
        print_table(&pg, &args, report.as_ref(), publication_exists, &tables);
        if let Some(h) = &history {
            println!(
                "history: walrelay has streamed from this slot since {} (created at LSN {}; last \
                 recorded confirmed LSN {})",
                h.created_at,
                h.created_lsn,
                h.last_confirmed()
            );
        }
    }

    match (report, history) {
        (None, Some(history)) => Err(slot_history::missing_slot_error(slot_name, &history)),
        (None, None) => Err(Error::permanent(format!(
            "replication slot {slot_name:?} does not exist; walrelay run creates it on its \
             first start"
        ))),
        (Some(r), _) if r.wal_status.as_deref() == Some("lost") => {
            Err(slot_history::lost_slot_error(slot_name, r.confirmed_flush))
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
            rows.push((
                "safe_wal_size",
                r.safe_wal_size
                    .map(|b| human_bytes(b.max(0) as u64))
                    .unwrap_or_else(|| "unlimited (max_slot_wal_keep_size = -1)".into()),
            ));
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
        println!("{key:<width$}  {value}");
    }
}
