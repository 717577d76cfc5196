//! The slot history older walrelays kept in a line of the publication's
//! comment (`walrelay-slot NAME created_lsn=… created_at=… confirmed_lsn=…
//! confirmed_at=…`). It is read once, when the state table has no row for
//! the slot, so that an upgrade does not forget a slot that existed.

use tokio_postgres::Client;

use super::{Delivered, SlotState};
use crate::error::Result;
use crate::postgres::lsn::Lsn;
use crate::postgres::sql_error;

const PREFIX: &str = "walrelay-slot ";

/// What the publication's comment remembers of `slot`, if anything.
pub async fn read(client: &Client, publication: &str, slot: &str) -> Result<Option<SlotState>> {
    let row = client
        .query_opt(
            "SELECT obj_description(oid, 'pg_publication') FROM pg_catalog.pg_publication \
             WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|e| sql_error("cannot read the publication's comment", e))?;
    let text: Option<String> = row.and_then(|r| r.get(0));
    Ok(text
        .unwrap_or_default()
        .lines()
        .filter_map(parse)
        .find(|h| h.slot == slot))
}

fn parse(line: &str) -> Option<SlotState> {
    let mut words = line.strip_prefix(PREFIX)?.split(' ');
    let slot = words.next()?.to_string();
    let mut fields = std::collections::HashMap::new();
    for word in words {
        let (k, v) = word.split_once('=')?;
        fields.insert(k, v);
    }
    let created_lsn: Lsn = fields.get("created_lsn")?.parse().ok()?;
    let created_at = fields.get("created_at")?.to_string();
    let delivered = match (fields.get("confirmed_lsn"), fields.get("confirmed_at")) {
        (Some(lsn), Some(at)) => Some(Delivered {
            lsn: lsn.parse().ok()?,
            // The comment never said which server history it meant.
            server: None,
            at: at.to_string(),
        }),
        _ => None,
    };
    Some(SlotState {
        slot,
        created: Some((created_lsn, created_at)),
        delivered,
        verified: None,
        outbox: Vec::new(),
        settings: None,
        kept_before: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_walrelays_comment_line_reads_as_a_created_slot() {
        let state = parse(
            "walrelay-slot orders created_lsn=0/16B3748 created_at=2026-11-01T10:00:00Z \
             confirmed_lsn=0/1700000 confirmed_at=2026-11-02T10:00:00Z",
        )
        .unwrap();
        assert_eq!(state.slot, "orders");
        assert_eq!(state.created.as_ref().unwrap().0, Lsn(0x16B3748));
        let delivered = state.delivered.unwrap();
        assert_eq!((delivered.lsn, delivered.server), (Lsn(0x1700000), None));
    }

    #[test]
    fn other_comment_lines_are_not_histories() {
        assert_eq!(parse("owned by the payments team"), None);
        assert_eq!(parse("walrelay-slot x created_lsn=zz"), None);
    }
}
