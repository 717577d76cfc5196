//! Turns an INSERT into the outbox table into an event. Columns are found by
//! name in the Relation message, never by position, so column order and
//! added columns do not matter.

use bytes::Bytes;

use crate::config::TableName;
use crate::error::Error;
use crate::postgres::pgoutput::{Datum, Relation, Tuple};

/// The outbox columns walrelay reads.
#[derive(Debug, Clone)]
pub struct OutboxColumns {
    pub id: String,
    pub key: String,
    pub event_type: String,
    pub payload: String,
    pub route_by: String,
}

impl OutboxColumns {
    pub fn with_route_by(route_by: &str) -> Self {
        OutboxColumns {
            id: "id".into(),
            key: "aggregate_id".into(),
            event_type: "event_type".into(),
            payload: "payload".into(),
            route_by: route_by.into(),
        }
    }

    pub fn names(&self) -> [&str; 5] {
        [
            &self.id,
            &self.key,
            &self.event_type,
            &self.payload,
            &self.route_by,
        ]
    }
}

/// Column positions of the outbox table, from its latest Relation message.
#[derive(Debug, Clone)]
pub struct OutboxSchema {
    id: usize,
    key: usize,
    event_type: usize,
    payload: usize,
    route_by: usize,
}

/// One outbox row, sharing memory with the replication message it came from.
#[derive(Debug, Clone, Default)]
pub struct OutboxEvent {
    pub id: Option<Bytes>,
    pub key: Option<Bytes>,
    pub event_type: Option<Bytes>,
    pub payload: Option<Bytes>,
    pub route_value: Option<Bytes>,
}

impl OutboxEvent {
    /// The event id for messages and logs.
    pub fn id_text(&self) -> String {
        match &self.id {
            Some(id) => String::from_utf8_lossy(id).into_owned(),
            None => "(NULL id)".into(),
        }
    }
}

impl OutboxSchema {
    /// Finds the mapped columns in a Relation message. A missing one (for
    /// example after a rename) is a permanent error naming the column.
    pub fn from_relation(
        relation: &Relation,
        columns: &OutboxColumns,
        table: &TableName,
    ) -> Result<Self, Error> {
        let find = |name: &str| {
            relation
                .columns
                .iter()
                .position(|c| c.name == name)
                .ok_or_else(|| {
                    Error::permanent(format!(
                        "the outbox table {table} no longer has a column {name:?} \
                         (was it renamed or dropped?); restore the column, or restart walrelay \
                         mapped to the new name; no event was confirmed past this point"
                    ))
                })
        };
        Ok(OutboxSchema {
            id: find(&columns.id)?,
            key: find(&columns.key)?,
            event_type: find(&columns.event_type)?,
            payload: find(&columns.payload)?,
            route_by: find(&columns.route_by)?,
        })
    }

    pub fn event(&self, mut tuple: Tuple) -> Result<OutboxEvent, String> {
        // The route-by column may be one of the others: read it first, as a copy.
        let route_value = match tuple.get(self.route_by) {
            Some(Datum::Text(bytes)) => Some(bytes.clone()),
            _ => None,
        };
        let columns = tuple.len();
        let mut take = |index: usize| match tuple.get_mut(index) {
            Some(datum) => match std::mem::replace(datum, Datum::Null) {
                Datum::Null => Ok(None),
                Datum::Text(bytes) => Ok(Some(bytes)),
                Datum::UnchangedToast => Err("an INSERT carried an unchanged TOAST value".into()),
            },
            None => Err(format!(
                "the row has {} columns but the outbox mapping needs column {}",
                columns,
                index + 1
            )),
        };
        Ok(OutboxEvent {
            id: take(self.id)?,
            key: take(self.key)?,
            event_type: take(self.event_type)?,
            payload: take(self.payload)?,
            route_value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::pgoutput::Column;

    fn relation(names: &[&str]) -> Relation {
        Relation {
            oid: 1,
            namespace: "public".into(),
            name: "outbox".into(),
            replica_identity: b'd',
            columns: names
                .iter()
                .map(|n| Column {
                    is_key: false,
                    name: n.to_string(),
                    type_oid: 25,
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    fn text(s: &str) -> Datum {
        Datum::Text(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn columns_are_found_by_name_in_any_order() {
        let table: TableName = "public.outbox".parse().unwrap();
        let rel = relation(&["payload", "extra", "event_type", "aggregate_id", "id"]);
        let schema =
            OutboxSchema::from_relation(&rel, &OutboxColumns::with_route_by("event_type"), &table)
                .unwrap();
        let event = schema
            .event(vec![
                text("{}"),
                Datum::Null,
                text("OrderPlaced"),
                text("42"),
                text("e-1"),
            ])
            .unwrap();
        assert_eq!(event.id.as_deref(), Some(&b"e-1"[..]));
        assert_eq!(event.key.as_deref(), Some(&b"42"[..]));
        assert_eq!(event.route_value.as_deref(), Some(&b"OrderPlaced"[..]));
        assert_eq!(event.payload.as_deref(), Some(&b"{}"[..]));
    }

    #[test]
    fn a_missing_column_is_named_in_the_error() {
        let table: TableName = "public.outbox".parse().unwrap();
        let rel = relation(&["id", "aggregate_id", "kind", "payload"]);
        let err =
            OutboxSchema::from_relation(&rel, &OutboxColumns::with_route_by("event_type"), &table)
                .unwrap_err();
        assert!(err.to_string().contains("\"event_type\""), "{err}");
    }
}
