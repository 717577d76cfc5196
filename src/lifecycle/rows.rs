//! Outbox rows read over SQL exactly as the replication stream would give
//! them, so that `outbox::mapping` turns them into the same events.
//!
//! pgoutput describes a table with a Relation message (each column's name,
//! type oid and type modifier, from the catalog) and sends each value in
//! the type's text output format, written with the walsender's output
//! settings. This reader builds the same `Relation` from `pg_attribute`
//! and reads the rows with the simple query protocol, whose values are
//! that same text output, under the same settings
//! (`postgres::wire::OUTPUT_SETTINGS`). A server-side cursor fetched in
//! batches keeps memory bounded whatever the number of rows.
//!
//! Replay, the audit and `run --snapshot-where` all read rows here.

use std::collections::{BTreeMap, BTreeSet};

use bytes::BytesMut;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::config::Settings;
use crate::error::{Error, Result};
use crate::outbox::mapping::OutboxSchema;
use crate::postgres::names::{quote_ident, quote_literal, TableName};
use crate::postgres::pgoutput::{Column, Datum, Relation, Tuple};
use crate::postgres::placement::column_defaults;
use crate::postgres::sql_error;
use crate::postgres::wire::OUTPUT_SETTINGS;

/// Most rows fetched from the cursor at a time: with the fetch of the next
/// batch overlapping the sending of this one (`sender`), batches this
/// large keep the reader ahead (docs/benchmarks.md).
const FETCH_ROWS: usize = 5000;
/// The first fetch, before the rows' size is known.
const FIRST_FETCH: usize = 100;
/// About the most bytes of values one batch holds: large rows are fetched
/// fewer at a time, so memory stays bounded whatever their size.
const FETCH_BYTES: usize = 8 << 20;

/// An outbox table as the stream describes it.
#[derive(Debug, Clone)]
pub struct OutboxTable {
    pub table: TableName,
    /// What a Relation message would say of it.
    pub relation: Relation,
    /// Its NOT NULL columns (pgoutput does not send them; the mapping's
    /// json-with-schema reads them from the catalog too).
    pub not_null: BTreeSet<String>,
    /// Its columns' DEFAULTs, as placing its Relation reads them (a NULL
    /// comes out as the default, as streamed events do).
    pub defaults: BTreeMap<String, String>,
    /// Its primary key's columns, in key order.
    pub primary_key: Vec<String>,
}

/// Opens the transaction every reader works in: one snapshot for the plan
/// and the rows, read only so that a predicate cannot write, and the
/// walsender's output settings. `snapshot` imports an exported snapshot.
pub async fn begin(client: &Client, snapshot: Option<&str>) -> Result<()> {
    let mut sql = String::from("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;");
    if let Some(name) = snapshot {
        sql.push_str(&format!(
            "SET TRANSACTION SNAPSHOT {};",
            quote_literal(name)
        ));
    }
    for (name, value) in OUTPUT_SETTINGS {
        sql.push_str(&format!("SET LOCAL {name} = {};", quote_literal(value)));
    }
    client
        .batch_execute(&sql)
        .await
        .map_err(|e| sql_error("cannot open the transaction that reads the outbox", e))
}

impl OutboxTable {
    /// Reads the table's columns from the catalog as pgoutput would send
    /// them: every column but dropped and generated ones, in order, the key
    /// flag from the replica identity.
    pub async fn describe(client: &Client, table: &TableName) -> Result<Self> {
        let rows = client
            .query(
                "SELECT c.oid, c.relreplident::text, a.attname::text, a.atttypid, a.atttypmod, \
                        a.attnotnull, COALESCE(a.attnum = ANY(i.indkey), false), \
                        COALESCE(array_position(p.indkey::int2[], a.attnum) + 1, 0) \
                 FROM pg_catalog.pg_class c \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid \
                 LEFT JOIN pg_catalog.pg_index i ON i.indrelid = c.oid \
                      AND ((c.relreplident = 'd' AND i.indisprimary) \
                           OR (c.relreplident = 'i' AND i.indisreplident)) \
                 LEFT JOIN pg_catalog.pg_index p ON p.indrelid = c.oid AND p.indisprimary \
                 WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p') \
                   AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' \
                 ORDER BY a.attnum",
                &[&table.schema, &table.name],
            )
            .await
            .map_err(|e| sql_error(format!("cannot read the columns of {table}"), e))?;
        let Some(first) = rows.first() else {
            return Err(Error::permanent(format!(
                "table {table} does not exist (or this user cannot see it): point --table at \
                 the outbox table"
            )));
        };
        let full = first.get::<_, String>(1) == "f";
        let mut columns = Vec::with_capacity(rows.len());
        let mut not_null = BTreeSet::new();
        let mut primary_key: Vec<(i32, String)> = Vec::new();
        for row in &rows {
            let name: String = row.get(2);
            if row.get::<_, bool>(5) {
                not_null.insert(name.clone());
            }
            // int2vector counts from 0: positions here start at 1, 0 is none.
            let key_position: i32 = row.get(7);
            if key_position > 0 {
                primary_key.push((key_position, name.clone()));
            }
            columns.push(Column {
                is_key: full || row.get::<_, bool>(6),
                name,
                type_oid: row.get(3),
                type_modifier: row.get(4),
            });
        }
        primary_key.sort();
        let defaults = column_defaults(client, first.get(0)).await?;
        Ok(OutboxTable {
            table: table.clone(),
            relation: Relation {
                oid: first.get(0),
                namespace: table.schema.clone(),
                name: table.name.clone(),
                replica_identity: first.get::<_, String>(1).bytes().next().unwrap_or(b'd'),
                columns,
            },
            not_null,
            defaults,
            primary_key: primary_key.into_iter().map(|(_, name)| name).collect(),
        })
    }

    /// Whether the table has a column of this name.
    pub fn has_column(&self, name: &str) -> bool {
        self.relation.columns.iter().any(|c| c.name == name)
    }

    /// The SELECT of every column, in the Relation's order, of the rows
    /// `predicate` matches.
    fn select(&self, predicate: &str, order_by: &str) -> String {
        let columns: Vec<String> = self
            .relation
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect();
        format!(
            "SELECT {} FROM {} WHERE ({predicate}) ORDER BY {order_by}",
            columns.join(", "),
            self.table.quoted()
        )
    }
}

/// A server-side cursor over the matching rows, inside the transaction
/// `begin` opened.
pub struct RowCursor<'a> {
    client: &'a Client,
    name: String,
    done: bool,
    /// Rows the next FETCH asks for.
    fetch: usize,
}

impl<'a> RowCursor<'a> {
    /// Declares the cursor over every column of the rows of `table` that
    /// `predicate` selects. `predicate` and `order_by` are SQL, as the
    /// operator wrote them.
    pub async fn open(
        client: &'a Client,
        table: &OutboxTable,
        predicate: &str,
        order_by: &str,
    ) -> Result<RowCursor<'a>> {
        let what = format!(
            "the rows of {} WHERE {predicate} ORDER BY {order_by}",
            table.table
        );
        Self::declare(client, table, &table.select(predicate, order_by), &what).await
    }

    /// Declares the cursor over any SELECT of `table`'s rows; `what` names
    /// them in errors.
    pub async fn declare(
        client: &'a Client,
        table: &OutboxTable,
        select: &str,
        what: &str,
    ) -> Result<RowCursor<'a>> {
        let name = format!("walrelay_rows_{}", table.relation.oid);
        let sql = format!("DECLARE {name} NO SCROLL CURSOR FOR {select}");
        client
            .batch_execute(&sql)
            .await
            .map_err(|e| sql_error(format!("cannot select {what}"), e))?;
        Ok(RowCursor {
            client,
            name,
            done: false,
            fetch: FIRST_FETCH,
        })
    }

    /// The next rows, each a tuple as pgoutput would send it; None at the end.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<Tuple>>> {
        if self.done {
            return Ok(None);
        }
        let messages = self
            .client
            .simple_query(&format!("FETCH {} FROM {}", self.fetch, self.name))
            .await
            .map_err(|e| sql_error("cannot read the next outbox rows", e))?;
        // Every value of the batch in one buffer, each a slice of it: one
        // allocation a batch rather than one a value.
        let mut buffer = BytesMut::new();
        let mut spans: Vec<Vec<Option<(usize, usize)>>> = Vec::with_capacity(self.fetch);
        for message in &messages {
            if let SimpleQueryMessage::Row(row) = message {
                let span = (0..row.len())
                    .map(|i| {
                        row.get(i).map(|text| {
                            buffer.extend_from_slice(text.as_bytes());
                            (buffer.len() - text.len(), buffer.len())
                        })
                    })
                    .collect();
                spans.push(span);
            }
        }
        let buffer = buffer.freeze();
        let tuples: Vec<Tuple> = spans
            .into_iter()
            .map(|span| {
                span.into_iter()
                    .map(|value| match value {
                        Some((start, end)) => Datum::Text(buffer.slice(start..end)),
                        None => Datum::Null,
                    })
                    .collect()
            })
            .collect();
        let asked = self.fetch;
        let row_bytes = buffer.len() / tuples.len().max(1);
        self.fetch = (FETCH_BYTES / row_bytes.max(1)).clamp(1, FETCH_ROWS);
        if tuples.len() < asked {
            self.done = true;
            self.client
                .batch_execute(&format!("CLOSE {}", self.name))
                .await
                .map_err(|e| sql_error("cannot close the cursor over the outbox", e))?;
        }
        Ok((!tuples.is_empty()).then_some(tuples))
    }
}

/// Each outbox table with its mapping, as `run` would map its Relation.
pub async fn mapped_tables(
    client: &Client,
    settings: &Settings,
) -> Result<Vec<(OutboxTable, OutboxSchema)>> {
    let mut tables = Vec::new();
    for name in &settings.tables {
        let table = OutboxTable::describe(client, name).await?;
        let schema = OutboxSchema::from_relation(
            &table.relation,
            &settings.mapping,
            name,
            &table.not_null,
            &table.defaults,
        )?;
        tables.push((table, schema));
    }
    Ok(tables)
}

/// How many matching rows each route-by value has: the plan of a replay or
/// snapshot. NULL is its own value.
pub async fn count_by_route(
    client: &Client,
    table: &OutboxTable,
    predicate: &str,
    route_by: &str,
) -> Result<Vec<(Option<String>, u64)>> {
    let sql = format!(
        "SELECT {col}::text, count(*) FROM {} WHERE ({predicate}) GROUP BY 1 ORDER BY 1",
        table.table.quoted(),
        col = quote_ident(route_by)
    );
    let rows = client.query(&sql, &[]).await.map_err(|e| {
        sql_error(
            format!("cannot count the rows of {} WHERE {predicate}", table.table),
            e,
        )
    })?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get::<_, i64>(1) as u64))
        .collect())
}
