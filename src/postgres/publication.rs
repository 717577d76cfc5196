//! The publication that feeds the slot, and how the outbox table is bound to it.
//!
//! pgoutput decides what to send from the publication, so every way the
//! publication can stop covering the outbox is a way to lose events without
//! a word: a partitioned outbox published leaf by leaf (its partitions'
//! names are not the outbox's), a row filter, a table dropped and recreated
//! (which removes it from the publication), a table removed by hand. One
//! reading of the catalog ([`inspect`]) serves the start-up checks and the
//! watchdog, and [`Binding::problem`] says what is wrong and how to fix it.

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;
use tracing::info;

use super::names::{quote_ident, TableName};
use super::state::OutboxIdentity;
use super::{server_version, sql_error};
use crate::error::{Error, Result};

/// The first release with `publish_via_partition_root`.
const PARTITION_ROOT_VERSION: i32 = 130000;
/// The first release with row filters (`pg_publication_tables.rowfilter`).
const ROW_FILTER_VERSION: i32 = 150000;

/// What the catalog says about the outbox table and the publication now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The table named `--table`, if there is one.
    pub table: Option<TableInfo>,
    /// The publication, if it exists.
    pub publication: Option<PublicationInfo>,
    /// The table is listed by its own name in `pg_publication_tables`.
    pub table_listed: bool,
    /// Some partition of the table is listed by its own name.
    pub partition_listed: bool,
    /// The row filter on the table (PostgreSQL 15+), which would drop events.
    pub row_filter: Option<String>,
    /// How the publication includes the table: the publication's oid and
    /// the catalog rows that list the table (or its schema, or all tables).
    /// Removing a table and adding it back makes new rows, so this tells
    /// a table that left the publication for a while from one that stayed.
    pub membership: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableInfo {
    pub oid: u32,
    pub partitioned: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicationInfo {
    pub inserts: bool,
    pub updates: bool,
    pub via_root: bool,
}

impl Binding {
    /// Why the publication does not deliver every INSERT into the outbox
    /// (with the fix), or None when it does. `expected_oid` is the table
    /// walrelay started with: a different one means it was recreated.
    pub fn problem(
        &self,
        publication: &str,
        table: &TableName,
        expected: Option<&OutboxIdentity>,
    ) -> Option<Problem> {
        let expected_oid = expected.map(|e| e.oid);
        let pub_q = quote_ident(publication);
        let Some(info) = self.table else {
            return Some(Problem::new(
                format!(
                    "the outbox table {table} no longer exists (dropped or renamed): its changes \
                     can no longer be read as events"
                ),
                "restore the table (or point --table at its new name) and restart walrelay",
            ));
        };
        if let Some(expected) = expected_oid.filter(|&o| o != info.oid) {
            return Some(Problem::new(
                format!(
                    "the outbox table {table} was dropped and recreated (oid {expected} became \
                     {}): a dropped table leaves the publication, so INSERTs into the new table \
                     may not have been published",
                    info.oid
                ),
                format!(
                    "check that publication {publication:?} includes it (ALTER PUBLICATION \
                     {pub_q} ADD TABLE {};), publish by hand any event written before it did, \
                     and restart walrelay",
                    table.quoted()
                ),
            ));
        }
        let Some(p) = self.publication else {
            return Some(Problem::new(
                format!(
                    "publication {publication:?} no longer exists: nothing is published to the \
                     slot"
                ),
                format!(
                    "recreate it (CREATE PUBLICATION {pub_q} FOR TABLE {} WITH (publish = \
                     'insert', publish_via_partition_root = true);), publish by hand any event \
                     written while it was missing, and restart walrelay",
                    table.quoted()
                ),
            ));
        };
        if !p.inserts {
            return Some(Problem::new(
                format!("publication {publication:?} does not publish inserts"),
                format!("run ALTER PUBLICATION {pub_q} SET (publish = 'insert');"),
            ));
        }
        if info.partitioned && !p.via_root {
            return Some(Problem::new(
                format!(
                    "the outbox table {table} is partitioned and publication {publication:?} \
                     publishes its partitions under their own names, so a partition walrelay \
                     has not seen (one attached later, the DEFAULT one) could be missed"
                ),
                format!("run ALTER PUBLICATION {pub_q} SET (publish_via_partition_root = true);"),
            ));
        }
        if !self.table_listed && !self.partition_listed {
            return Some(Problem::new(
                format!("publication {publication:?} does not include {table}"),
                format!(
                    "run ALTER PUBLICATION {pub_q} ADD TABLE {}; or choose another --publication",
                    table.quoted()
                ),
            ));
        }
        if let Some(expected) = expected.filter(|e| Some(&e.membership) != self.membership.as_ref())
        {
            return Some(Problem::new(
                format!(
                    "the outbox table {table} left publication {publication:?} and was added \
                     back (its membership {} became {})",
                    expected.membership,
                    self.membership.as_deref().unwrap_or("none")
                ),
                "INSERTs made while it was out were not published: publish them again, then \
                 start walrelay once with --accept-outbox-change",
            ));
        }
        if let Some(filter) = &self.row_filter {
            return Some(Problem::new(
                format!(
                    "publication {publication:?} publishes {table} with a row filter (WHERE \
                     {filter}), which would drop every event it does not match"
                ),
                format!(
                    "remove it in one transaction with BEGIN; ALTER PUBLICATION {pub_q} DROP \
                     TABLE {t}; ALTER PUBLICATION {pub_q} ADD TABLE {t}; COMMIT;",
                    t = table.quoted()
                ),
            ));
        }
        None
    }
}

/// What is wrong with how the outbox is published, and what fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub what: String,
    pub fix: String,
}

impl Problem {
    fn new(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Problem {
            what: what.into(),
            fix: fix.into(),
        }
    }

    /// The refusal `run` stops with.
    pub fn into_error(self) -> Error {
        Error::refusal(self.what, self.fix)
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.fix)
    }
}

impl Binding {
    /// The table as walrelay accepts it now, when it exists and is published.
    pub fn identity(&self, table: &TableName) -> Option<OutboxIdentity> {
        Some(OutboxIdentity {
            table: table.to_string(),
            oid: self.table?.oid,
            membership: self.membership.clone()?,
            earlier_oids: Vec::new(),
            accepted_through: None,
        })
    }
}

/// The tables a publication lists (as schema.table), or None if it does not exist.
pub async fn tables(client: &Client, publication: &str) -> Result<Option<Vec<String>>> {
    let failed = |e| sql_error(format!("cannot read publication {publication:?}"), e);
    let rows = client
        .query(
            "SELECT t.schemaname || '.' || t.tablename FROM pg_catalog.pg_publication p \
             LEFT JOIN pg_catalog.pg_publication_tables t ON t.pubname = p.pubname \
             WHERE p.pubname = $1 ORDER BY 1",
            &[&publication],
        )
        .await
        .map_err(failed)?;
    if rows.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        rows.iter()
            .filter_map(|r| r.get::<_, Option<String>>(0))
            .collect(),
    ))
}

/// Reads the table and the publication as they are now, in one snapshot: a
/// change that commits between two queries would otherwise be misread (the
/// old table's oid checked against the new membership).
pub async fn inspect(client: &Client, publication: &str, table: &TableName) -> Result<Binding> {
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .map_err(|e| sql_error("cannot start a read of the catalog", e))?;
    let binding = read_binding(client, publication, table).await;
    let end = if binding.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    client
        .batch_execute(end)
        .await
        .map_err(|e| sql_error("cannot end a read of the catalog", e))?;
    binding
}

async fn read_binding(client: &Client, publication: &str, table: &TableName) -> Result<Binding> {
    let version = server_version(client).await?;
    let failed = |e| sql_error(format!("cannot inspect publication {publication:?}"), e);
    let table_info = client
        .query_opt(
            "SELECT c.oid, c.relkind = 'p' FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
            &[&table.schema, &table.name],
        )
        .await
        .map_err(failed)?
        .map(|row| TableInfo {
            oid: row.get(0),
            partitioned: row.get(1),
        });
    let via_root = if version >= PARTITION_ROOT_VERSION {
        "pubviaroot"
    } else {
        "false"
    };
    let publication_info = client
        .query_opt(
            &format!(
                "SELECT pubinsert, pubupdate, {via_root} FROM pg_catalog.pg_publication \
                 WHERE pubname = $1"
            ),
            &[&publication],
        )
        .await
        .map_err(failed)?
        .map(|row| PublicationInfo {
            inserts: row.get(0),
            updates: row.get(1),
            via_root: row.get(2),
        });
    let mut binding = Binding {
        table: table_info,
        publication: publication_info,
        table_listed: false,
        partition_listed: false,
        row_filter: None,
        membership: None,
    };
    let (Some(info), Some(_)) = (table_info, publication_info) else {
        return Ok(binding);
    };
    binding.membership = membership(client, version, publication, info.oid).await?;
    let row_filter = if version >= ROW_FILTER_VERSION {
        "t.rowfilter"
    } else {
        "NULL::text"
    };
    // Every published relation that is the table or one of its partitions.
    let rows = client
        .query(
            &format!(
                "SELECT c.oid = $2, {row_filter} \
                 FROM pg_catalog.pg_publication_tables t \
                 JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname \
                 JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename \
                 WHERE t.pubname = $1 \
                   AND (c.oid = $2 OR c.oid IN \
                        (SELECT relid FROM pg_catalog.pg_partition_tree($2::oid::regclass)))"
            ),
            &[&publication, &info.oid],
        )
        .await
        .map_err(failed)?;
    for row in rows {
        if row.get::<_, bool>(0) {
            binding.table_listed = true;
            binding.row_filter = row.get(1);
        } else {
            binding.partition_listed = true;
        }
    }
    Ok(binding)
}

/// The catalog rows through which `publication` includes the table `oid`
/// (see [`Binding::membership`]); None if it does not include it at all.
async fn membership(
    client: &Client,
    version: i32,
    publication: &str,
    oid: u32,
) -> Result<Option<String>> {
    // FOR TABLES IN SCHEMA came with PostgreSQL 15.
    let schemas = if version >= ROW_FILTER_VERSION {
        "(SELECT string_agg(pn.oid::text, ',' ORDER BY pn.oid) \
          FROM pg_catalog.pg_publication_namespace pn \
          WHERE pn.pnpubid = p.oid AND pn.pnnspid IN \
                (SELECT c.relnamespace FROM pg_catalog.pg_class c \
                 WHERE c.oid = $2 OR c.oid IN \
                       (SELECT relid FROM pg_catalog.pg_partition_ancestors($2::oid::regclass))))"
    } else {
        "NULL::text"
    };
    let row = client
        .query_one(
            &format!(
                "SELECT p.oid::text, p.puballtables, \
                   (SELECT string_agg(pr.oid::text, ',' ORDER BY pr.oid) \
                    FROM pg_catalog.pg_publication_rel pr \
                    WHERE pr.prpubid = p.oid AND (pr.prrelid = $2 \
                      OR pr.prrelid IN (SELECT relid FROM pg_catalog.pg_partition_tree($2::oid::regclass)) \
                      OR pr.prrelid IN (SELECT relid FROM pg_catalog.pg_partition_ancestors($2::oid::regclass)))), \
                   {schemas} \
                 FROM pg_catalog.pg_publication p WHERE p.pubname = $1"
            ),
            &[&publication, &oid],
        )
        .await
        .map_err(|e| sql_error(format!("cannot read how publication {publication:?} includes the outbox"), e))?;
    let (pub_oid, all): (String, bool) = (row.get(0), row.get(1));
    let rels: Option<String> = row.get(2);
    let schemas: Option<String> = row.get(3);
    let mut parts = vec![format!("publication {pub_oid}")];
    if all {
        parts.push("all tables".into());
    }
    if let Some(rels) = rels {
        parts.push(format!("rel {rels}"));
    }
    if let Some(schemas) = schemas {
        parts.push(format!("schema {schemas}"));
    }
    Ok((parts.len() > 1).then(|| parts.join(" ")))
}

/// The oids in a membership (the text [`membership`] builds): the
/// publication's, and the catalog rows that list the table or its schema.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MembershipOids {
    pub publication: Option<u32>,
    pub rels: Vec<u32>,
    pub schemas: Vec<u32>,
}

impl MembershipOids {
    pub fn parse(membership: &str) -> Self {
        let mut oids = MembershipOids::default();
        let mut words = membership.split(' ');
        while let Some(word) = words.next() {
            let list = || words.clone().next().unwrap_or("");
            let parsed = |l: &str| l.split(',').filter_map(|o| o.parse().ok()).collect();
            match word {
                "publication" => oids.publication = list().parse().ok(),
                "rel" => oids.rels = parsed(list()),
                "schema" => oids.schemas = parsed(list()),
                _ => {}
            }
        }
        oids
    }
}

/// Creates the publication if it is absent (for the outbox tables, or with
/// no tables for the table-less outbox) and checks that it covers each
/// table. Returns the tables as they are now, in order. `updates`: a new
/// publication publishes UPDATEs too, for `--on-update error|fatal`.
pub async fn ensure(
    client: &Client,
    name: &str,
    tables: &[TableName],
    updates: bool,
) -> Result<Vec<OutboxIdentity>> {
    if tables.is_empty() {
        let exists = client
            .query_opt(
                "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1",
                &[&name],
            )
            .await
            .map_err(|e| sql_error("cannot read pg_publication", e))?
            .is_some();
        if exists {
            info!(publication = name, "reusing publication");
        } else {
            create(client, name, &create_sql(name, &[], 0, false)).await?;
            info!(publication = name, "created publication");
        }
        return Ok(Vec::new());
    }
    let mut bindings = Vec::with_capacity(tables.len());
    for table in tables {
        let binding = inspect(client, name, table).await?;
        if binding.table.is_none() {
            return Err(Error::permanent(format!(
                "table {table} does not exist (or this user cannot see it): create it \
                 (sql/outbox.sql has the default layout) or point --table at your outbox table"
            )));
        }
        bindings.push(binding);
    }
    let infos: Vec<TableInfo> = bindings.iter().filter_map(|b| b.table).collect();
    if bindings.iter().all(|b| b.publication.is_some()) {
        info!(publication = name, "reusing publication");
    } else {
        let version = server_version(client).await?;
        if let Some((table, _)) = tables
            .iter()
            .zip(&infos)
            .find(|(_, info)| info.partitioned && version < PARTITION_ROOT_VERSION)
        {
            return Err(Error::permanent(format!(
                "the outbox table {table} is partitioned, which logical replication supports \
                 from PostgreSQL 13 on (this server is {}): upgrade, or use a plain table",
                version / 10000
            )));
        }
        create(client, name, &create_sql(name, tables, version, updates)).await?;
        info!(publication = name, "created publication");
        // Read again what the new publication binds.
        bindings.clear();
        for table in tables {
            bindings.push(inspect(client, name, table).await?);
        }
    }
    let mut identities = Vec::with_capacity(tables.len());
    for (table, binding) in tables.iter().zip(&bindings) {
        if let Some(problem) = binding.problem(name, table, None) {
            return Err(problem.into_error());
        }
        identities.push(binding.identity(table).ok_or_else(|| {
            Error::transient(format!("the outbox table {table} changed during start-up"))
        })?);
    }
    Ok(identities)
}

/// Why this role cannot create the publication `run` would create, and the
/// statements that let it; None when it can, or the publication exists.
/// One decision for `run`, before it creates anything, and for `walrelay
/// check`: CREATE PUBLICATION needs CREATE on the database, and FOR TABLE
/// needs each table's owner (a superuser needs neither).
pub async fn creation_refusal(
    client: &Client,
    name: &str,
    tables: &[TableName],
    updates: bool,
) -> Result<Option<(String, String)>> {
    let read = |e| {
        sql_error(
            "cannot read whether this role may create the publication",
            e,
        )
    };
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1",
            &[&name],
        )
        .await
        .map_err(read)?
        .is_some();
    if exists {
        return Ok(None);
    }
    let role = client
        .query_one(
            "SELECT r.rolsuper, has_database_privilege(current_database(), 'CREATE'), \
                    current_database()::text, current_user::text \
             FROM pg_catalog.pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await
        .map_err(read)?;
    let (superuser, may_create, database, user): (bool, bool, String, String) =
        (role.get(0), role.get(1), role.get(2), role.get(3));
    if superuser {
        return Ok(None);
    }
    let mut reasons = Vec::new();
    let mut grants = Vec::new();
    if !may_create {
        reasons.push(format!("it may not CREATE in database {database}"));
        grants.push(format!(
            "GRANT CREATE ON DATABASE {} TO {};",
            quote_ident(&database),
            quote_ident(&user)
        ));
    }
    for table in tables {
        // A missing table is the table check's to report.
        let owned: Option<bool> = client
            .query_opt(
                "SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_catalog.pg_class c \
                 WHERE c.oid = to_regclass($1)",
                &[&table.quoted()],
            )
            .await
            .map_err(read)?
            .map(|row| row.get(0));
        if owned == Some(false) {
            reasons.push(format!("it does not own {table}"));
            grants.push(format!(
                "ALTER TABLE {} OWNER TO {};",
                table.quoted(),
                quote_ident(&user)
            ));
        }
    }
    if grants.is_empty() {
        return Ok(None);
    }
    let sql = create_sql(name, tables, server_version(client).await?, updates);
    Ok(Some((
        format!(
            "publication {name:?} does not exist, and role {user} cannot create it: {}",
            reasons.join(", and ")
        ),
        format!("{} or let a role that can run {sql};", grants.join(" ")),
    )))
}

/// The statement that creates the publication for the outbox tables (none
/// for the table-less outbox) on a server of `version`: the one walrelay
/// runs, and the one it names where it cannot (a standby, a role that does
/// not own the table).
pub fn create_sql(name: &str, tables: &[TableName], version: i32, updates: bool) -> String {
    if tables.is_empty() {
        return format!("CREATE PUBLICATION {}", quote_ident(name));
    }
    // Through the root, every partition's rows arrive under the outbox's
    // name, including partitions attached later. UPDATEs only for
    // --on-update error|fatal, which must see them.
    let publish = if updates { "insert, update" } else { "insert" };
    let options = if version >= PARTITION_ROOT_VERSION {
        format!("publish = '{publish}', publish_via_partition_root = true")
    } else {
        format!("publish = '{publish}'")
    };
    let list: Vec<String> = tables.iter().map(TableName::quoted).collect();
    format!(
        "CREATE PUBLICATION {} FOR TABLE {} WITH ({options})",
        quote_ident(name),
        list.join(", ")
    )
}

async fn create(client: &Client, name: &str, sql: &str) -> Result<()> {
    client.batch_execute(sql).await.map_err(|e| {
        // A standby is read-only, and replays the publication from its primary.
        if e.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) {
            return Error::permanent(format!(
                "publication {name:?} does not exist, and --pg-url names a standby, which \
                 cannot create one: run {sql}; on the primary (as the table's owner), then \
                 start walrelay again"
            ))
            .with_source(e);
        }
        sql_error(
            format!("cannot create the publication; create it as the table's owner: {sql}"),
            e,
        )
    })
}

/// Why `--on-update error` or `fatal` cannot act on UPDATEs of outbox rows:
/// the publication does not publish them (None: it does). The connector's
/// publication (Debezium's FOR ALL TABLES, or FOR TABLE with every
/// operation) did, and its router warned, logged an error or failed on each.
pub fn updates_problem(publication: &str, publishes_updates: bool) -> Option<Problem> {
    (!publishes_updates).then(|| {
        Problem::new(
            format!(
                "--on-update error and fatal act on UPDATEs of outbox rows, and publication \
                 {publication:?} does not publish them, so they would never fire"
            ),
            format!(
                "run ALTER PUBLICATION {} SET (publish = 'insert, update'); or choose \
                 --on-update warn",
                quote_ident(publication)
            ),
        )
    })
}

/// Whether the publication sends UPDATEs; `--on-update` only sees them if it does.
pub async fn publishes_updates(
    client: &Client,
    publication: &str,
    table: &TableName,
) -> Result<bool> {
    let binding = inspect(client, publication, table).await?;
    Ok(binding.publication.is_some_and(|p| p.updates))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TableName {
        "public.outbox".parse().unwrap()
    }

    fn healthy(partitioned: bool) -> Binding {
        Binding {
            table: Some(TableInfo {
                oid: 42,
                partitioned,
            }),
            publication: Some(PublicationInfo {
                inserts: true,
                updates: false,
                via_root: true,
            }),
            table_listed: true,
            partition_listed: false,
            row_filter: None,
            membership: Some("publication 7 rel 9".into()),
        }
    }

    fn identity(oid: u32, membership: &str) -> OutboxIdentity {
        OutboxIdentity {
            table: "public.outbox".into(),
            oid,
            membership: membership.into(),
            earlier_oids: Vec::new(),
            accepted_through: None,
        }
    }

    fn problem(b: &Binding, expected: Option<u32>) -> String {
        let expected = expected.map(|oid| identity(oid, "publication 7 rel 9"));
        b.problem("walrelay", &table(), expected.as_ref())
            .expect("a problem")
            .to_string()
    }

    #[test]
    fn a_publication_that_covers_the_table_has_no_problem() {
        let same = identity(42, "publication 7 rel 9");
        assert_eq!(
            healthy(false).problem("walrelay", &table(), Some(&same)),
            None
        );
        assert_eq!(
            healthy(true).problem("walrelay", &table(), Some(&same)),
            None
        );
    }

    #[test]
    fn a_membership_reads_back_as_its_oids() {
        let m = MembershipOids::parse("publication 7 all tables rel 9,11 schema 3");
        assert_eq!(m.publication, Some(7));
        assert_eq!(m.rels, vec![9, 11]);
        assert_eq!(m.schemas, vec![3]);
        assert_eq!(MembershipOids::parse(""), MembershipOids::default());
    }

    #[test]
    fn a_table_that_left_the_publication_and_came_back_is_told_apart_by_its_membership() {
        let before = identity(42, "publication 7 rel 9");
        let mut b = healthy(false);
        b.membership = Some("publication 7 rel 11".into());
        let text = b
            .problem("walrelay", &table(), Some(&before))
            .expect("a problem")
            .to_string();
        assert!(
            text.contains("left publication \"walrelay\" and was added back"),
            "{text}"
        );
        assert_eq!(
            b.identity(&table()),
            Some(identity(42, "publication 7 rel 11"))
        );
    }

    #[test]
    fn a_partitioned_outbox_needs_publish_via_partition_root() {
        let mut b = healthy(true);
        b.publication.as_mut().unwrap().via_root = false;
        b.table_listed = false;
        b.partition_listed = true;
        assert!(problem(&b, None)
            .contains("ALTER PUBLICATION \"walrelay\" SET (publish_via_partition_root = true);"));
        // A plain table does not care.
        let mut plain = healthy(false);
        plain.publication.as_mut().unwrap().via_root = false;
        assert_eq!(plain.problem("walrelay", &table(), None), None);
    }

    #[test]
    fn a_recreated_table_is_told_apart_by_its_oid() {
        let text = problem(&healthy(false), Some(7));
        assert!(
            text.contains("dropped and recreated (oid 7 became 42)"),
            "{text}"
        );
    }

    #[test]
    fn a_table_missing_from_the_publication_names_the_fix() {
        let mut b = healthy(false);
        b.table_listed = false;
        assert!(problem(&b, Some(42))
            .contains("ALTER PUBLICATION \"walrelay\" ADD TABLE \"public\".\"outbox\";"));
    }

    #[test]
    fn a_row_filter_is_refused_because_it_drops_events() {
        let mut b = healthy(false);
        b.row_filter = Some("(event_type = 'a'::text)".into());
        assert!(problem(&b, None).contains("row filter"));
    }

    #[test]
    fn a_dropped_table_or_publication_is_a_problem() {
        let mut b = healthy(false);
        b.publication = None;
        assert!(problem(&b, Some(42)).contains("no longer exists"));
        b.table = None;
        assert!(problem(&b, Some(42)).contains("no longer exists"));
    }

    #[test]
    fn the_create_statement_publishes_inserts_through_the_partition_root() {
        let tables = [table(), "shop.outbox".parse().unwrap()];
        assert_eq!(
            create_sql("walrelay", &tables, 170000, false),
            "CREATE PUBLICATION \"walrelay\" FOR TABLE \"public\".\"outbox\", \"shop\".\"outbox\" \
             WITH (publish = 'insert', publish_via_partition_root = true)"
        );
        assert_eq!(
            create_sql("walrelay", &tables[..1], 120000, false),
            "CREATE PUBLICATION \"walrelay\" FOR TABLE \"public\".\"outbox\" WITH (publish = 'insert')"
        );
        assert_eq!(
            create_sql("walrelay", &[], 170000, false),
            "CREATE PUBLICATION \"walrelay\""
        );
    }

    #[test]
    fn a_publication_without_inserts_is_refused() {
        let mut b = healthy(false);
        b.publication.as_mut().unwrap().inserts = false;
        assert!(problem(&b, None).contains("SET (publish = 'insert')"));
    }
}
