//! Where a relation the replication stream names belongs: the outbox (or
//! one of its partitions), another table of the publication, a table that
//! took the outbox's name after walrelay accepted it, or nothing the
//! catalog knows now. Asked once per relation and session, over the
//! session's own SQL connection, so the per-event path never queries.

use std::collections::{BTreeMap, BTreeSet};

use tokio_postgres::Client;

use super::lsn::Lsn;
use super::names::TableName;
use super::pgoutput::Relation;
use super::sql_error;
use crate::error::Result;

/// How a relation that appears in the replication stream relates to the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelationRole {
    /// The outbox table itself, or one of its partitions: its rows are
    /// events. `not_null` names its NOT NULL columns and `defaults` maps
    /// columns to their DEFAULT expressions, which the Relation message does
    /// not carry (Debezium's schemas mark the others optional and hold the
    /// defaults).
    Outbox {
        not_null: BTreeSet<String>,
        defaults: BTreeMap<String, String>,
    },
    /// Another table the publication publishes: its rows are not events.
    Other,
    /// Neither, as far as the catalog says now (for example, a dropped table).
    Unknown,
    /// A table with an outbox table's name (or a partition of one) that is
    /// not the table walrelay accepted: the outbox was dropped and
    /// recreated, and rows written before the new one joined the
    /// publication never reached the slot.
    Replaced {
        table: TableName,
        oid: u32,
        /// The last position at which the outbox was known intact.
        since: Lsn,
    },
}

/// Places the relations a session's stream names, over the session's own
/// SQL connection.
pub struct RelationResolver {
    pub client: Client,
    pub publication: String,
    /// The outbox tables.
    pub tables: Vec<TableName>,
    /// The oids of the outbox tables walrelay accepted (see `state`).
    pub accepted: Vec<u32>,
    /// The WAL position at which the session's start found them intact.
    pub intact_at: Lsn,
}

impl RelationResolver {
    pub async fn role(&self, relation: &Relation) -> Result<RelationRole> {
        let named = self
            .tables
            .iter()
            .find(|t| relation.namespace == t.schema && relation.name == t.name);
        let root = match named {
            Some(table) => Some((table.clone(), relation.oid)),
            None => {
                match outbox_root(&self.client, &self.publication, &self.tables, relation.oid)
                    .await?
                {
                    Placed::Under(table, root) => Some((table, root)),
                    Placed::Published => return Ok(RelationRole::Other),
                    Placed::Nowhere => return Ok(RelationRole::Unknown),
                }
            }
        };
        match root {
            Some((table, oid)) if !self.accepted.contains(&oid) => Ok(RelationRole::Replaced {
                table,
                oid,
                since: self.intact_at,
            }),
            _ => Ok(RelationRole::Outbox {
                not_null: not_null_columns(&self.client, relation.oid).await?,
                defaults: column_defaults(&self.client, relation.oid).await?,
            }),
        }
    }
}

/// Where the catalog puts a relation that is not named like an outbox table.
enum Placed {
    /// A partition of this outbox table, whose oid is the second.
    Under(TableName, u32),
    /// Another table the publication publishes.
    Published,
    /// Neither (for example, a table dropped since).
    Nowhere,
}

/// The NOT NULL columns of a relation (a partition's include those of its
/// root, which Postgres copies to every partition).
pub async fn not_null_columns(client: &Client, oid: u32) -> Result<BTreeSet<String>> {
    let rows = client
        .query(
            "SELECT attname::text FROM pg_catalog.pg_attribute \
             WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attnotnull",
            &[&oid],
        )
        .await
        .map_err(|e| sql_error(format!("cannot read the columns of relation oid {oid}"), e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The DEFAULT expressions of a relation's columns, as the JDBC driver's
/// COLUMN_DEF (and so Debezium) reads them: `pg_get_expr(adbin, adrelid)`.
pub async fn column_defaults(client: &Client, oid: u32) -> Result<BTreeMap<String, String>> {
    let rows = client
        .query(
            "SELECT a.attname::text, pg_catalog.pg_get_expr(d.adbin, d.adrelid) \
             FROM pg_catalog.pg_attrdef d JOIN pg_catalog.pg_attribute a \
               ON a.attrelid = d.adrelid AND a.attnum = d.adnum \
             WHERE d.adrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped",
            &[&oid],
        )
        .await
        .map_err(|e| {
            sql_error(
                format!("cannot read the column defaults of relation oid {oid}"),
                e,
            )
        })?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Places a relation walrelay has not seen before in this session. Runs once
/// per relation and session, so the per-event path never queries.
async fn outbox_root(
    client: &Client,
    publication: &str,
    tables: &[TableName],
    oid: u32,
) -> Result<Placed> {
    let failed = |e| sql_error(format!("cannot look up relation oid {oid}"), e);
    let exists = client
        .query_opt("SELECT 1 FROM pg_catalog.pg_class WHERE oid = $1", &[&oid])
        .await
        .map_err(failed)?
        .is_some();
    if !exists {
        return Ok(Placed::Nowhere);
    }
    let schemas: Vec<&str> = tables.iter().map(|t| t.schema.as_str()).collect();
    let names: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
    let row = client
        .query_one(
            "WITH root AS ( \
               SELECT c.oid, n.nspname::text, c.relname::text \
               FROM pg_catalog.pg_partition_ancestors($1::oid::regclass) a \
               JOIN pg_catalog.pg_class c ON c.oid = a.relid \
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
               JOIN unnest($2::text[], $3::text[]) AS o(nspname, relname) \
                    ON o.nspname = n.nspname AND o.relname = c.relname \
               LIMIT 1) \
             SELECT (SELECT oid FROM root), (SELECT nspname FROM root), \
                    (SELECT relname FROM root), \
                    EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables t \
                            JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname \
                            JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid \
                                 AND c.relname = t.tablename \
                            WHERE t.pubname = $4 AND c.oid = $1)",
            &[&oid, &schemas, &names, &publication],
        )
        .await
        .map_err(failed)?;
    let root: Option<u32> = row.get(0);
    Ok(
        match (
            root,
            row.get::<_, Option<String>>(1),
            row.get::<_, Option<String>>(2),
        ) {
            (Some(root), Some(schema), Some(name)) => {
                Placed::Under(TableName { schema, name }, root)
            }
            _ if row.get::<_, bool>(3) => Placed::Published,
            _ => Placed::Nowhere,
        },
    )
}
