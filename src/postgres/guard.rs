//! The guard (`sql/walrelay_guard.sql`): an event trigger that writes a
//! transactional logical message, prefix `walrelay.guard`, whenever a
//! command changes a publication or drops, renames or alters a table.
//!
//! Why a message in the WAL and not only the catalog checks at start-up and
//! in the watchdog: the catalog shows how the outbox is published *now*. A
//! publication's `publish` option switched off and on again, or a row
//! filter set and removed, between two looks loses every insert in between
//! and leaves nothing to compare; a table taken out and put back is seen
//! only after the slot has confirmed past the gap. The guard's message is
//! decoded in commit order with the change itself, so walrelay stops at the
//! exact transaction where the outbox stopped being published, even when it
//! was down at the time, and names that position.
//!
//! Each message lists the catalog objects the command touched by oid, with
//! what they are after it (or that they are gone). [`Watch::judge`] compares
//! them with the outbox tables and the publication walrelay accepted; any
//! other table or publication is none of its business.

use serde::Deserialize;
use tokio_postgres::Client;

use super::lsn::Lsn;
use super::names::TableName;
use super::publication::MembershipOids;
use super::sql_error;
use super::state::OutboxIdentity;
use crate::error::Result;

/// The prefix of the guard's messages.
pub const PREFIX: &str = "walrelay.guard";

/// One guard message: the command tag and the objects it touched.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Notice {
    pub tag: String,
    pub objects: Vec<Object>,
}

/// A catalog object a command touched, as it is after the command.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "class")]
pub enum Object {
    #[serde(rename = "table")]
    Table {
        oid: u32,
        schema: Option<String>,
        name: Option<String>,
    },
    #[serde(rename = "publication")]
    Publication {
        oid: u32,
        name: Option<String>,
        insert: Option<bool>,
        via_root: Option<bool>,
    },
    /// A `pg_publication_rel` row: a table listed by a publication.
    #[serde(rename = "publication relation")]
    Member {
        oid: u32,
        publication: Option<u32>,
        relation: Option<u32>,
        row_filter: Option<bool>,
    },
    /// A `pg_publication_namespace` row: a schema listed by a publication.
    #[serde(rename = "publication namespace")]
    SchemaMember { oid: u32, publication: Option<u32> },
    #[serde(other)]
    Other,
}

impl Notice {
    pub fn parse(content: &[u8]) -> std::result::Result<Self, serde_json::Error> {
        serde_json::from_slice(content)
    }
}

/// One outbox table as the guard watches it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Guarded {
    table: TableName,
    /// Its oid and those of the tables it replaced (their rows may still
    /// be in the slot).
    oids: Vec<u32>,
    /// Its oid now.
    oid: u32,
    partitioned: bool,
}

/// What the guard's messages are judged against: the outbox tables and
/// their membership of the publication, as this session accepted them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    publication: String,
    publication_oid: Option<u32>,
    rels: Vec<u32>,
    schemas: Vec<u32>,
    tables: Vec<Guarded>,
    /// Changes committed before this position were accepted with
    /// --accept-outbox-change: their messages are read past.
    pub accepted_through: Option<Lsn>,
}

impl Watch {
    /// `partitioned` tells, per table, whether it is partitioned (then the
    /// publication must publish via the root).
    pub fn new(
        publication: &str,
        outbox: &[OutboxIdentity],
        partitioned: &[bool],
        accepted_through: Option<Lsn>,
    ) -> Self {
        let mut watch = Watch {
            publication: publication.to_string(),
            publication_oid: None,
            rels: Vec::new(),
            schemas: Vec::new(),
            tables: Vec::new(),
            accepted_through,
        };
        for (identity, &partitioned) in outbox.iter().zip(partitioned) {
            let member = MembershipOids::parse(&identity.membership);
            watch.publication_oid = watch.publication_oid.or(member.publication);
            watch.rels.extend(member.rels);
            watch.schemas.extend(member.schemas);
            watch.tables.push(Guarded {
                table: identity.table.parse().unwrap_or_else(|_| TableName {
                    schema: String::new(),
                    name: identity.table.clone(),
                }),
                oids: identity.oids().collect(),
                oid: identity.oid,
                partitioned,
            });
        }
        watch
    }

    /// How the command changed the way the outbox is published, if it did.
    pub fn judge(&self, notice: &Notice) -> Option<String> {
        let changes: Vec<String> = notice
            .objects
            .iter()
            .filter_map(|object| self.judge_object(object))
            .collect();
        (!changes.is_empty()).then(|| format!("{} ({})", changes.join("; "), notice.tag))
    }

    fn judge_object(&self, object: &Object) -> Option<String> {
        let publication = &self.publication;
        let ours = |oid: &Option<u32>| oid.is_some() && *oid == self.publication_oid;
        match object {
            Object::Table { oid, schema, name } => {
                if let Some(t) = self.tables.iter().find(|t| t.oids.contains(oid)) {
                    return match (schema, name) {
                        (Some(s), Some(n)) if *s == t.table.schema && *n == t.table.name => None,
                        (Some(s), Some(n)) => Some(format!(
                            "the outbox table {} was renamed to {s}.{n}",
                            t.table
                        )),
                        _ if *oid == t.oid => {
                            Some(format!("the outbox table {} was dropped", t.table))
                        }
                        // A table the outbox replaced earlier: gone for good.
                        _ => None,
                    };
                }
                let named = self.tables.iter().find(|t| {
                    schema.as_deref() == Some(t.table.schema.as_str())
                        && name.as_deref() == Some(t.table.name.as_str())
                })?;
                Some(format!(
                    "another table (oid {oid}) took the outbox table's name {}",
                    named.table
                ))
            }
            Object::Publication {
                oid,
                name,
                insert,
                via_root,
            } if ours(&Some(*oid)) => match name {
                None => Some(format!("publication {publication:?} was dropped")),
                Some(n) if n != publication => {
                    Some(format!("publication {publication:?} was renamed to {n:?}"))
                }
                _ if *insert == Some(false) => Some(format!(
                    "publication {publication:?} no longer publishes inserts"
                )),
                _ if *via_root == Some(false) && self.tables.iter().any(|t| t.partitioned) => {
                    Some(format!(
                        "publication {publication:?} no longer publishes partitions' rows \
                         under the outbox's name (publish_via_partition_root = false)"
                    ))
                }
                _ => None,
            },
            Object::Member {
                oid,
                publication: pubid,
                relation,
                row_filter,
            } => {
                let table = || {
                    self.tables
                        .iter()
                        .find(|t| Some(t.oid) == *relation)
                        .map(|t| t.table.to_string())
                };
                if self.rels.contains(oid) {
                    if pubid.is_none() {
                        return Some(format!("an outbox table left publication {publication:?}"));
                    }
                    if *row_filter == Some(true) {
                        return Some(format!(
                            "a row filter now limits what publication {publication:?} \
                             publishes of {}",
                            table().unwrap_or_else(|| "an outbox table".into())
                        ));
                    }
                    return None;
                }
                let table = table().filter(|_| ours(pubid))?;
                Some(format!(
                    "the outbox table {table} was added to publication {publication:?} again \
                     (a new membership: it had left it)"
                ))
            }
            Object::SchemaMember {
                oid,
                publication: pubid,
            } if self.schemas.contains(oid) && pubid.is_none() => Some(format!(
                "the outbox table's schema left publication {publication:?}"
            )),
            _ => None,
        }
    }
}

/// Whether the guard's two event triggers are installed and enabled.
pub async fn installed(client: &Client) -> Result<bool> {
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE e.evtenabled <> 'D') = 2 \
             FROM pg_catalog.pg_event_trigger e \
             WHERE e.evtname IN ('walrelay_guard_end', 'walrelay_guard_drop')",
            &[],
        )
        .await
        .map_err(|e| sql_error("cannot read pg_event_trigger", e))?;
    Ok(row.get(0))
}

/// Whether each table is partitioned, in order.
pub async fn partitioned(client: &Client, outbox: &[OutboxIdentity]) -> Result<Vec<bool>> {
    let oids: Vec<u32> = outbox.iter().map(|o| o.oid).collect();
    let rows = client
        .query(
            "SELECT o.oid, coalesce(c.relkind = 'p', false) \
             FROM unnest($1::oid[]) AS o(oid) \
             LEFT JOIN pg_catalog.pg_class c ON c.oid = o.oid",
            &[&oids],
        )
        .await
        .map_err(|e| sql_error("cannot read whether the outbox is partitioned", e))?;
    Ok(oids
        .iter()
        .map(|oid| {
            rows.iter()
                .find(|r| r.get::<_, u32>(0) == *oid)
                .is_some_and(|r| r.get(1))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        let outbox = [OutboxIdentity {
            table: "public.outbox".into(),
            oid: 100,
            membership: "publication 7 rel 9".into(),
            earlier_oids: vec![90],
            accepted_through: None,
        }];
        Watch::new("walrelay", &outbox, &[false], None)
    }

    fn notice(json: &str) -> Notice {
        Notice::parse(json.as_bytes()).unwrap()
    }

    fn judged(json: &str) -> Option<String> {
        watch().judge(&notice(json))
    }

    // The messages below are what sql/walrelay_guard.sql wrote on
    // PostgreSQL 15 for each command, with the oids changed to the watch's.
    #[test]
    fn the_outbox_leaving_the_publication_is_a_change() {
        let left = judged(
            r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 9, "class": "publication relation", "dropped": true}]}"#,
        );
        assert!(left.unwrap().contains("left publication"));
    }

    #[test]
    fn the_outbox_added_back_is_a_change_and_another_table_added_is_not() {
        let back = judged(
            r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 11, "class": "publication relation", "relation": 100, "row_filter": false, "publication": 7}]}"#,
        );
        assert!(back
            .unwrap()
            .contains("added to publication \"walrelay\" again"));
        let other = judged(
            r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 12, "class": "publication relation", "relation": 555, "row_filter": false, "publication": 7}]}"#,
        );
        assert_eq!(other, None);
        let elsewhere = judged(
            r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 13, "class": "publication relation", "relation": 100, "row_filter": false, "publication": 8}]}"#,
        );
        assert_eq!(elsewhere, None);
    }

    #[test]
    fn publishing_no_inserts_or_a_row_filter_is_a_change_and_publishing_updates_too_is_not() {
        let off = judged(
            r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 7, "name": "walrelay", "class": "publication", "insert": false, "via_root": true}]}"#,
        );
        assert!(off.unwrap().contains("no longer publishes inserts"));
        let updates_too = judged(
            r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 7, "name": "walrelay", "class": "publication", "insert": true, "via_root": true}]}"#,
        );
        assert_eq!(updates_too, None);
        let filtered = judged(
            r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 9, "class": "publication relation", "relation": 100, "row_filter": true, "publication": 7}]}"#,
        );
        assert!(filtered.unwrap().contains("row filter"));
    }

    #[test]
    fn publish_via_root_matters_only_for_a_partitioned_outbox() {
        let json = r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 7, "name": "walrelay", "class": "publication", "insert": true, "via_root": false}]}"#;
        assert_eq!(judged(json), None);
        let outbox = [OutboxIdentity {
            table: "public.outbox".into(),
            oid: 100,
            membership: "publication 7 rel 9".into(),
            earlier_oids: vec![],
            accepted_through: None,
        }];
        let partitioned = Watch::new("walrelay", &outbox, &[true], None);
        assert!(partitioned.judge(&notice(json)).is_some());
    }

    #[test]
    fn a_renamed_or_dropped_outbox_is_a_change_and_a_new_column_is_not() {
        let column = judged(
            r#"{"v": 1, "tag": "ALTER TABLE", "objects": [{"oid": 100, "name": "outbox", "class": "table", "schema": "public"}]}"#,
        );
        assert_eq!(column, None);
        let renamed = judged(
            r#"{"v": 1, "tag": "ALTER TABLE", "objects": [{"oid": 100, "name": "outbox2", "class": "table", "schema": "public"}]}"#,
        );
        assert!(renamed.unwrap().contains("renamed to public.outbox2"));
        let dropped = judged(
            r#"{"v": 1, "tag": "DROP TABLE", "objects": [{"oid": 100, "class": "table", "dropped": true}, {"oid": 9, "class": "publication relation", "dropped": true}]}"#,
        );
        let dropped = dropped.unwrap();
        assert!(dropped.contains("was dropped"), "{dropped}");
        assert!(dropped.contains("left publication"), "{dropped}");
        // The table the outbox replaced goes at last: nothing to say.
        let earlier = judged(
            r#"{"v": 1, "tag": "DROP TABLE", "objects": [{"oid": 90, "class": "table", "dropped": true}]}"#,
        );
        assert_eq!(earlier, None);
    }

    #[test]
    fn a_table_renamed_into_the_outboxs_name_is_a_change() {
        let taken = judged(
            r#"{"v": 1, "tag": "ALTER TABLE", "objects": [{"oid": 321, "name": "outbox", "class": "table", "schema": "public"}]}"#,
        );
        assert!(taken.unwrap().contains("took the outbox table's name"));
    }

    #[test]
    fn the_publication_dropped_or_renamed_is_a_change_and_another_publication_is_not() {
        let dropped = judged(
            r#"{"v": 1, "tag": "DROP PUBLICATION", "objects": [{"oid": 7, "class": "publication", "dropped": true}]}"#,
        );
        assert!(dropped.unwrap().contains("was dropped"));
        let renamed = judged(
            r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 7, "name": "wr2", "class": "publication", "insert": true, "via_root": true}]}"#,
        );
        assert!(renamed.unwrap().contains("renamed to \"wr2\""));
        let other = judged(
            r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 8, "name": "other", "class": "publication", "insert": false, "via_root": true}]}"#,
        );
        assert_eq!(other, None);
    }

    #[test]
    fn objects_of_other_kinds_are_read_past() {
        let schema = judged(
            r#"{"v": 1, "tag": "ALTER PUBLICATION", "objects": [{"oid": 16424, "class": "publication namespace", "namespace": 16423, "publication": 7}, {"oid": 5, "class": "sequence"}]}"#,
        );
        assert_eq!(schema, None);
    }
}
