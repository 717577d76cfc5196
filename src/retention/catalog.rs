//! What retention reads from the catalog and the server: each outbox table
//! (plain, or partitioned with its partitions and their bounds), whether
//! the role may do what retention is asked to do there, the slot's
//! confirmed position, and the snapshot a plan is made in.

use tokio_postgres::Client;

use super::RetentionSettings;
use crate::error::{Error, Result};
use crate::postgres::lsn::Lsn;
use crate::postgres::names::{quote_ident, TableName};
use crate::postgres::sql_error;

/// One outbox table as retention sees it.
#[derive(Debug, Clone)]
pub struct Outbox {
    pub table: TableName,
    /// The time column, quoted.
    pub column: String,
    /// Its type as `format_type` names it.
    pub column_type: String,
    pub partitioned: bool,
    /// The DEFAULT partition of a partitioned outbox.
    pub default: Option<TableName>,
}

impl Outbox {
    /// The tables whose rows are deleted one by one: a plain outbox, or the
    /// DEFAULT partition of a partitioned one (the others are dropped whole).
    pub fn row_leaves(&self) -> Vec<&TableName> {
        match (self.partitioned, &self.default) {
            (false, _) => vec![&self.table],
            (true, Some(default)) => vec![default],
            (true, None) => Vec::new(),
        }
    }
}

/// A partition of a partitioned outbox with its bounds as SQL literals'
/// text (None: MINVALUE, MAXVALUE, or not a one-column range).
#[derive(Debug, Clone)]
pub struct Partition {
    pub table: TableName,
    pub default: bool,
    pub lower: Option<String>,
    pub upper: Option<String>,
}

/// The one type retention compares times in. A `timestamp` or a `date`
/// holds a wall-clock time or day in the zone of the session that wrote it
/// (PgJDBC sends the JVM's zone, so `DEFAULT now()` stores the writer's
/// local time); compared in retention's own zone, a writer east of it would
/// have rows from before the slot deleted, one west of it a partition still
/// written to judged expired. walrelay cannot know each writer's zone.
const TIME_TYPE: &str = "timestamp with time zone";

/// Why the time column of `table` cannot be retention's, and the fix; None
/// when it is a timestamptz.
pub fn time_type_problem(
    table: &TableName,
    column: &str,
    column_type: &str,
    partitioned: bool,
) -> Option<(String, String)> {
    if column_type == TIME_TYPE {
        return None;
    }
    let flag = format!("--retention-time-column {column} of {table} is {column_type}");
    let quoted = quote_ident(column);
    let zoned = match column_type {
        "timestamp without time zone" => {
            format!("{quoted} AT TIME ZONE '<the zone the writers used>'")
        }
        "date" => format!("{quoted}::timestamp AT TIME ZONE '<the zone the writers used>'"),
        _ => {
            return Some((
                format!(
                    "{flag}; retention needs a timestamptz column holding each row's insert time"
                ),
                "name a timestamptz column with each row's insert time (DEFAULT \
                 clock_timestamp()) in --retention-time-column, or drop --retention and \
                 --partitions-ahead"
                    .to_string(),
            ))
        }
    };
    let detail = format!(
        "{flag}, a wall-clock value in each writer's session time zone (a PgJDBC writer \
         sends the JVM's zone, and DEFAULT now() stores that zone's local time), which \
         walrelay cannot know: compared in its own zone, rows from before the slot could be \
         deleted and a partition still written to judged expired; retention needs timestamptz"
    );
    let default = if column_type == "date" {
        format!(
            ", then ALTER TABLE {} ALTER COLUMN {quoted} SET DEFAULT clock_timestamp()",
            table.quoted()
        )
    } else {
        String::new()
    };
    let fix = if partitioned {
        format!(
            "{column} is the partition key of {table}, and Postgres cannot change a partition \
             key's type in place (ALTER COLUMN … TYPE is refused): the table must be rebuilt. \
             Create a new outbox partitioned BY RANGE ({quoted}) with {quoted} timestamptz \
             (sql/outbox_partitioned.sql), copy the rows into it with {zoned}, and swap the \
             names while no writer runs and once walrelay has published every row \
             (docs/operations.md, \"Outbox retention\"); or drop --retention and \
             --partitions-ahead"
        )
    } else {
        format!(
            "make it timestamptz, naming the zone the writers used: ALTER TABLE {} ALTER COLUMN \
             {quoted} TYPE timestamptz USING {zoned}{default} (this rewrites the table under an \
             ACCESS EXCLUSIVE lock); or drop --retention",
            table.quoted()
        )
    };
    Some((detail, fix))
}

/// The first time column that cannot be retention's, with its fix: what
/// `run` checks before it creates anything, and `walrelay check` reports.
/// A missing table or column is left to `inspect`.
pub async fn time_columns(
    client: &Client,
    tables: &[TableName],
    settings: &RetentionSettings,
) -> Result<Option<(String, String)>> {
    let column = &settings.time_column;
    for table in tables {
        let row = client
            .query_opt(
                "SELECT c.relkind::text, format_type(a.atttypid, a.atttypmod) \
                 FROM pg_catalog.pg_class c \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 JOIN pg_catalog.pg_attribute a \
                   ON a.attrelid = c.oid AND a.attname = $3 AND NOT a.attisdropped \
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&table.schema, &table.name, column],
            )
            .await
            .map_err(|e| sql_error(format!("cannot read the catalog entry of {table}"), e))?;
        let Some(row) = row else { continue };
        let (kind, column_type): (String, String) = (row.get(0), row.get(1));
        if let Some(problem) = time_type_problem(table, column, &column_type, kind == "p") {
            return Ok(Some(problem));
        }
    }
    Ok(None)
}

/// Each table, checked: it exists, has the time column, and is partitioned
/// as retention needs. What the role may do there is `lacks`'s to say.
pub async fn inspect(
    client: &Client,
    tables: &[TableName],
    settings: &RetentionSettings,
) -> Result<Vec<Outbox>> {
    refuse_standby(client).await?;
    let mut outboxes = Vec::new();
    for table in tables {
        outboxes.push(inspect_one(client, table, settings).await?);
    }
    Ok(outboxes)
}

async fn refuse_standby(client: &Client) -> Result<()> {
    let in_recovery: bool = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .map_err(|e| sql_error("cannot ask whether Postgres is a standby", e))?
        .get(0);
    if in_recovery {
        return Err(Error::permanent(
            "--retention deletes outbox rows, and --pg-url names a standby (read-only): point \
             --pg-url at the primary, or drop --retention and --partitions-ahead",
        ));
    }
    Ok(())
}

/// What the catalog says of one table and of the role's rights there.
struct Entry {
    kind: String,
    column_type: Option<String>,
    select: bool,
    delete: bool,
    /// The role is (a member of) the table's owner.
    owner: bool,
    role: String,
    /// Partitioned BY RANGE on the time column alone.
    by_time: Option<bool>,
    read_all_stats: bool,
    create: bool,
}

async fn entry(client: &Client, table: &TableName, column: &str) -> Result<Option<Entry>> {
    let row = client
        .query_opt(
            "SELECT c.relkind::text, format_type(a.atttypid, a.atttypmod), \
                    has_table_privilege(c.oid, 'SELECT'), has_table_privilege(c.oid, 'DELETE'), \
                    pg_has_role(c.relowner, 'USAGE'), current_user::text, \
                    (SELECT pt.partstrat::text = 'r' AND pt.partnatts = 1 \
                            AND pt.partattrs[0] = a.attnum \
                       FROM pg_catalog.pg_partitioned_table pt WHERE pt.partrelid = c.oid), \
                    pg_has_role('pg_read_all_stats', 'USAGE') \
                       OR (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), \
                    has_schema_privilege(c.relnamespace, 'CREATE') \
             FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN pg_catalog.pg_attribute a \
               ON a.attrelid = c.oid AND a.attname = $3 AND NOT a.attisdropped \
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&table.schema, &table.name, &column],
        )
        .await
        .map_err(|e| sql_error(format!("cannot read the catalog entry of {table}"), e))?;
    Ok(row.map(|row| Entry {
        kind: row.get(0),
        column_type: row.get(1),
        select: row.get(2),
        delete: row.get(3),
        owner: row.get(4),
        role: row.get(5),
        by_time: row.get(6),
        read_all_stats: row.get::<_, Option<bool>>(7).unwrap_or(false),
        create: row.get(8),
    }))
}

async fn inspect_one(
    client: &Client,
    table: &TableName,
    settings: &RetentionSettings,
) -> Result<Outbox> {
    let column = &settings.time_column;
    let Some(entry) = entry(client, table, column).await? else {
        return Err(Error::permanent(format!(
            "outbox retention: table {table} does not exist"
        )));
    };
    let Some(column_type) = entry.column_type else {
        return Err(Error::permanent(format!(
            "--retention-time-column {column}: table {table} has no such column; name the \
             column that holds each row's insert time"
        )));
    };
    let partitioned = match entry.kind.as_str() {
        "r" => false,
        "p" => true,
        other => {
            return Err(Error::permanent(format!(
                "outbox retention: {table} is not a table (relkind {other})"
            )))
        }
    };
    if let Some((detail, fix)) = time_type_problem(table, column, &column_type, partitioned) {
        return Err(Error::permanent(format!("{detail}: {fix}")));
    }
    if settings.partitions_ahead > 0 && !partitioned {
        return Err(Error::permanent(format!(
            "--partitions-ahead makes partitions of an outbox partitioned by time, and {table} \
             is not partitioned (sql/outbox_partitioned.sql is); drop --partitions-ahead"
        )));
    }
    let mut default = None;
    if partitioned {
        if entry.by_time != Some(true) {
            return Err(Error::permanent(format!(
                "outbox retention drops partitions of {table} by their bounds, which needs the \
                 table partitioned BY RANGE ({column}) alone (sql/outbox_partitioned.sql); \
                 partition it so, or set --retention-time-column to its partition key"
            )));
        }
        default = list(client, table)
            .await?
            .into_iter()
            .find(|p| p.default)
            .map(|p| p.table);
    }
    Ok(Outbox {
        table: table.clone(),
        column: quote_ident(column),
        column_type,
        partitioned,
        default,
    })
}

/// Something retention needs and lacks, and the statement that gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lack {
    pub what: String,
    pub fix: String,
}

/// Where retention's floor stands for the partitions it may drop: one
/// whose lower bound is before it is never dropped (module doc of
/// `retention`, step 2), so its owner does not matter.
#[derive(Debug, Clone)]
pub enum Floor {
    /// The slot's creation as walrelay recorded it.
    Since(String),
    /// No slot yet: it is created after this start, so now.
    FirstStart,
    /// The record could not be read: every partition counts.
    Unknown,
}

/// Everything the role lacks for what retention is asked to do on
/// `tables`, all of it (a set-up with five gaps must not take five
/// restarts to learn them): the rights on each table, the ownership of each
/// partition retention may drop, from `floor` on (`ALTER TABLE outbox OWNER
/// TO` does not carry over to partitions a DBA made), `pg_read_all_stats`, CREATE on
/// the schema for `--partitions-ahead`, DELETE on the DEFAULT partition,
/// and the publication's `publish_via_partition_root`. A missing table or
/// column, or a partition scheme retention cannot use, is left to
/// `inspect`.
pub async fn lacks(
    client: &Client,
    tables: &[TableName],
    settings: &RetentionSettings,
    publication: &str,
    floor: &Floor,
) -> Result<Vec<Lack>> {
    let mut found: Vec<Lack> = Vec::new();
    for table in tables {
        for lack in lacks_of(client, table, settings, publication, floor).await? {
            // Tables in one schema need its CREATE once.
            if !found.iter().any(|l| l.fix == lack.fix) {
                found.push(lack);
            }
        }
    }
    Ok(found)
}

async fn lacks_of(
    client: &Client,
    table: &TableName,
    settings: &RetentionSettings,
    publication: &str,
    floor: &Floor,
) -> Result<Vec<Lack>> {
    let mut found = Vec::new();
    let Some(entry) = entry(client, table, &settings.time_column).await? else {
        return Ok(found);
    };
    let partitioned = entry.kind == "p";
    let deleting = settings.keep.is_some();
    let role = &entry.role;
    let quoted_role = quote_ident(role);
    if !entry.select || (deleting && !partitioned && !entry.delete) {
        found.push(Lack {
            what: format!("role {role} may not read and delete the old rows of {table}"),
            fix: format!(
                "GRANT SELECT, DELETE ON {} TO {quoted_role};",
                table.quoted()
            ),
        });
    }
    if !partitioned || entry.by_time != Some(true) {
        return Ok(found);
    }
    if !entry.owner {
        found.push(Lack {
            what: format!(
                "role {role} does not own {table}: detaching partitions (and creating them, \
                 for --partitions-ahead) is its owner's (GRANT the owner TO {quoted_role}; \
                 does as well)"
            ),
            fix: format!("ALTER TABLE {} OWNER TO {quoted_role};", table.quoted()),
        });
    }
    if deleting {
        for (partition, owner) in unowned_partitions(client, table, floor).await? {
            found.push(Lack {
                what: format!(
                    "partition {partition} is owned by {owner}, not {role}, so retention could \
                     never drop it (ALTER TABLE {} OWNER TO does not change its partitions' \
                     owner)",
                    table.quoted()
                ),
                fix: format!("ALTER TABLE {} OWNER TO {quoted_role};", partition.quoted()),
            });
        }
    }
    if deleting && !entry.read_all_stats {
        found.push(Lack {
            what: format!(
                "role {role} may not read other roles' transactions, and retention keeps a \
                 partition while a transaction that started before its upper bound runs"
            ),
            fix: format!("GRANT pg_read_all_stats TO {quoted_role};"),
        });
    }
    if settings.partitions_ahead > 0 && !entry.create {
        found.push(Lack {
            what: format!(
                "--partitions-ahead creates partitions in schema {}, and role {role} may not",
                table.schema
            ),
            fix: format!(
                "GRANT CREATE ON SCHEMA {} TO {quoted_role};",
                quote_ident(&table.schema)
            ),
        });
    }
    if let Some(lack) = default_lack(client, table, deleting, role).await? {
        found.push(lack);
    }
    found.extend(publication_lack(client, table, publication).await?);
    Ok(found)
}

/// The partitions of `table` retention may drop (not DEFAULT, whose rows
/// are deleted one by one; a FROM … TO … range from the floor on) that the
/// role does not own, with their owners.
async fn unowned_partitions(
    client: &Client,
    table: &TableName,
    floor: &Floor,
) -> Result<Vec<(TableName, String)>> {
    let (every, since) = match floor {
        Floor::Since(since) => (false, Some(since.as_str())),
        Floor::FirstStart => (false, None),
        Floor::Unknown => (true, None),
    };
    let rows = client
        .query(
            "SELECT n.nspname::text, c.relname::text, pg_get_userbyid(c.relowner)::text \
             FROM pg_catalog.pg_inherits i \
             JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), \
                  '^FOR VALUES FROM \\(''([^'']*)''\\) TO \\(''([^'']*)''\\)$') m ON true \
             WHERE i.inhparent = $1::text::regclass \
               AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT' \
               AND NOT pg_has_role(c.relowner, 'USAGE') \
               AND ($2 OR m[1]::timestamptz >= COALESCE($3::text::timestamptz, now())) \
             ORDER BY c.relname",
            &[&table.quoted(), &every, &since],
        )
        .await
        .map_err(|e| sql_error(format!("cannot read who owns the partitions of {table}"), e))?;
    Ok(rows
        .iter()
        .map(|r| {
            let partition = TableName {
                schema: r.get(0),
                name: r.get(1),
            };
            (partition, r.get(2))
        })
        .collect())
}

/// The DEFAULT partition's rows are deleted as rows: SELECT and DELETE.
async fn default_lack(
    client: &Client,
    table: &TableName,
    deleting: bool,
    role: &str,
) -> Result<Option<Lack>> {
    if !deleting {
        return Ok(None);
    }
    let Some(leaf) = list(client, table).await?.into_iter().find(|p| p.default) else {
        return Ok(None);
    };
    let leaf = leaf.table;
    let may: bool = client
        .query_one(
            "SELECT has_table_privilege($1::text::regclass, 'SELECT') \
                AND has_table_privilege($1::text::regclass, 'DELETE')",
            &[&leaf.quoted()],
        )
        .await
        .map_err(|e| sql_error("cannot read a partition's privileges", e))?
        .get(0);
    Ok((!may).then(|| Lack {
        what: format!(
            "--retention deletes old rows of the DEFAULT partition {leaf}, and role {role} may not"
        ),
        fix: format!(
            "GRANT SELECT, DELETE ON {} TO {};",
            leaf.quoted(),
            quote_ident(role)
        ),
    }))
}

/// A publication that exists and publishes the partitions under their own
/// names: walrelay refuses it (`publication::Binding::problem`), so it is
/// named here too, with the rest.
async fn publication_lack(
    client: &Client,
    table: &TableName,
    publication: &str,
) -> Result<Option<Lack>> {
    let binding = crate::postgres::publication::inspect(client, publication, table).await?;
    let partitioned = binding.table.is_some_and(|t| t.partitioned);
    let via_root = binding.publication.map(|p| p.via_root);
    if !partitioned || via_root != Some(false) {
        return Ok(None);
    }
    Ok(Some(Lack {
        what: format!(
            "publication {publication:?} publishes the partitions of {table} under their own \
             names, so a partition walrelay has not seen could be missed"
        ),
        fix: format!(
            "ALTER PUBLICATION {} SET (publish_via_partition_root = true);",
            quote_ident(publication)
        ),
    }))
}

/// One error naming every lack and, as its fix, every statement; None when
/// nothing lacks.
pub fn refusal(lacks: &[Lack]) -> Option<Error> {
    if lacks.is_empty() {
        return None;
    }
    let what: Vec<String> = lacks
        .iter()
        .enumerate()
        .map(|(i, l)| format!("({}) {}", i + 1, l.what))
        .collect();
    let fix: Vec<&str> = lacks.iter().map(|l| l.fix.as_str()).collect();
    let fix = fix.join(" ");
    Some(
        Error::permanent(format!(
            "outbox retention cannot do what it is asked, for want of {}: {}. Run, as a \
             superuser (or the tables' owner): {fix}",
            if lacks.len() == 1 {
                "one thing".to_string()
            } else {
                format!("{} things, all listed here", lacks.len())
            },
            what.join("; ")
        ))
        .with_fix(fix),
    )
}

/// The partitions of `table` with their bounds.
pub async fn list(client: &Client, table: &TableName) -> Result<Vec<Partition>> {
    let rows = client
        .query(
            "SELECT n.nspname::text, c.relname::text, \
                    pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT', \
                    m[1], m[2] \
             FROM pg_catalog.pg_inherits i \
             JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), \
                  '^FOR VALUES FROM \\(''([^'']*)''\\) TO \\(''([^'']*)''\\)$') m ON true \
             WHERE i.inhparent = $1::text::regclass",
            &[&table.quoted()],
        )
        .await
        .map_err(|e| sql_error(format!("cannot list the partitions of {table}"), e))?;
    Ok(rows
        .iter()
        .map(|r| Partition {
            table: TableName {
                schema: r.get(0),
                name: r.get(1),
            },
            default: r.get::<_, Option<bool>>(2).unwrap_or(false),
            lower: r.get(3),
            upper: r.get(4),
        })
        .collect())
}

/// A REPEATABLE READ snapshot with the WAL insert position read in it.
pub struct Snapshot {
    pub l0: Lsn,
}

impl Snapshot {
    /// Its first statement takes the snapshot and then reads L0 (see the
    /// module doc of `retention`).
    pub async fn take(client: &Client) -> Result<Snapshot> {
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(|e| sql_error("cannot start retention's snapshot", e))?;
        let text: String = client
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await
            .map_err(|e| sql_error("cannot read the WAL insert position", e))?
            .get(0);
        let l0 = text
            .parse()
            .map_err(|_| Error::permanent(format!("Postgres returned a bad LSN: {text}")))?;
        Ok(Snapshot { l0 })
    }

    pub async fn end(self, client: &Client) -> Result<()> {
        client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| sql_error("cannot end retention's snapshot", e))
    }
}

/// The slot's `confirmed_flush_lsn`; None when the slot is missing.
pub async fn slot_confirmed(client: &Client, slot: &str) -> Result<Option<Lsn>> {
    let row = client
        .query_opt(
            "SELECT confirmed_flush_lsn::text FROM pg_catalog.pg_replication_slots \
             WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| sql_error("cannot read the slot's confirmed position", e))?;
    Ok(row
        .and_then(|r| r.get::<_, Option<String>>(0))
        .and_then(|t| t.parse().ok()))
}

/// The age in seconds of the oldest row of every outbox table (0: none).
pub async fn oldest_row_age(client: &Client, outboxes: &[Outbox]) -> Result<f64> {
    let mut oldest: f64 = 0.0;
    for outbox in outboxes {
        let sql = format!(
            "SELECT EXTRACT(EPOCH FROM now() - min({}::timestamptz))::float8 FROM {}",
            outbox.column,
            outbox.table.quoted()
        );
        let age: Option<f64> = client
            .query_one(&sql, &[])
            .await
            .map_err(|e| sql_error(format!("cannot read the oldest row of {}", outbox.table), e))?
            .get(0);
        oldest = oldest.max(age.unwrap_or(0.0));
    }
    Ok(oldest)
}

/// Whether any table holds rows from before `floor`.
pub async fn any_before(client: &Client, outboxes: &[Outbox], floor: &str) -> Result<bool> {
    for outbox in outboxes {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE {} < $1::text::timestamptz)",
            outbox.table.quoted(),
            outbox.column
        );
        let found: bool = client
            .query_one(&sql, &[&floor])
            .await
            .map_err(|e| sql_error(format!("cannot read {}", outbox.table), e))?
            .get(0);
        if found {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lack(what: &str, fix: &str) -> Lack {
        Lack {
            what: what.to_string(),
            fix: fix.to_string(),
        }
    }

    #[test]
    fn nothing_lacking_is_no_refusal() {
        assert!(refusal(&[]).is_none());
    }

    #[test]
    fn a_refusal_names_every_lack_and_every_statement_is_its_fix() {
        let refused = refusal(&[
            lack(
                "partition a is owned by postgres",
                "ALTER TABLE a OWNER TO w;",
            ),
            lack("no pg_read_all_stats", "GRANT pg_read_all_stats TO w;"),
        ])
        .expect("a refusal");
        let message = refused.to_string();
        assert!(message.contains("2 things, all listed here"), "{message}");
        assert!(
            message.contains("(1) partition a is owned by postgres"),
            "{message}"
        );
        assert!(message.contains("(2) no pg_read_all_stats"), "{message}");
        assert_eq!(
            refused.fix(),
            Some("ALTER TABLE a OWNER TO w; GRANT pg_read_all_stats TO w;")
        );
    }
}
