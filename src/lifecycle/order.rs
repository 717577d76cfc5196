//! The order `walrelay replay` and the first start's snapshot send rows in:
//! one that keeps each key's events in the order they were written, or a
//! refusal naming the order that would.
//!
//! # The premise
//!
//! An outbox keeps each key's events in order when the key's writers are
//! serialized (they lock the aggregate's row, or one process owns the
//! key): a key's inserts then happen, and commit, one after the other. A
//! row read back from the table carries no commit order, so the order must
//! come from a column that grows with each insert, within one transaction
//! and from one serialized writer to the next:
//!
//! - an integer column filled by a sequence (identity, `serial`, `DEFAULT
//!   nextval(…)`) that hands out one value at a time (`CACHE 1`, the
//!   default) and does not cycle. Across concurrent transactions a
//!   sequence is not in commit order, but those write different keys.
//!   With `CACHE n` each session takes n values at once, so a later insert
//!   in another session can get a smaller one;
//! - a timestamptz column `DEFAULT clock_timestamp()`, the clock at each
//!   insert. Two rows written in the same microsecond, or a clock stepped
//!   back, keep no order; a sequence has neither weakness.
//!
//! Not `now()` / `CURRENT_TIMESTAMP` (the transaction's start: equal for
//! every row of a transaction, and a writer that waited for the key's lock
//! started before the one it waited for), `statement_timestamp()`, a
//! random id (a UUID), a `timestamp without time zone` (wall-clock time
//! repeats an hour when clocks go back), nor `xmin` (the order transaction
//! ids were handed out, not commit order, and it wraps around).
//!
//! # The rule
//!
//! An ORDER BY is accepted when its first item, past any leading key
//! column (a key's rows all share it), is such a column, ascending; what
//! follows only breaks ties. Anything else (an expression, `DESC`, another
//! column first) is refused, naming the order that works on this table, or
//! the `ALTER TABLE` that adds a column for one. Without `--order-by` the
//! order is the primary key when it is such a column, else a column filled
//! by a sequence, else a clock column with the primary key after it to
//! break ties, else the same refusal.
//! Rows written before such a column existed are ordered by whatever it
//! holds for them: an identity column added to a table numbers its rows in
//! the order they lie on disk.

use std::collections::BTreeMap;

use tokio_postgres::Client;

use super::rows::OutboxTable;
use crate::error::{Error, Result};
use crate::postgres::names::quote_ident;
use crate::postgres::sql_error;

/// What the catalog says of one column.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnFacts {
    /// As `format_type` names it.
    pub type_name: String,
    /// Its DEFAULT, as `pg_get_expr` writes it.
    pub default: Option<String>,
    pub identity: bool,
    /// The sequence behind an identity or a `nextval` DEFAULT.
    pub sequence: Option<SequenceFacts>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceFacts {
    pub name: String,
    pub cache: i64,
    pub cycle: bool,
}

/// How a column grows with each insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grows {
    Sequence,
    Clock,
}

const INTEGER_TYPES: [&str; 4] = ["smallint", "integer", "bigint", "numeric"];

impl ColumnFacts {
    /// How it grows, or why it does not (a phrase after its name).
    fn grows(&self) -> std::result::Result<Grows, String> {
        let default = self.default.as_deref().unwrap_or("");
        let sequenced = self.identity || default.starts_with("nextval(");
        if let (true, Some(seq)) = (sequenced, &self.sequence) {
            if !INTEGER_TYPES.contains(&self.type_name.as_str()) {
                return Err(format!(
                    "is {} filled by a sequence, which does not sort as numbers",
                    self.type_name
                ));
            }
            if seq.cache > 1 {
                return Err(format!(
                    "is filled by sequence {} with CACHE {}: each session takes {} values at \
                     once, so a later insert from another session can get a smaller one \
                     (ALTER SEQUENCE {} CACHE 1 makes it grow with each insert)",
                    seq.name, seq.cache, seq.cache, seq.name
                ));
            }
            if seq.cycle {
                return Err(format!(
                    "is filled by sequence {}, which cycles back to its start",
                    seq.name
                ));
            }
            if self.identity || is_call(default, "nextval") {
                return Ok(Grows::Sequence);
            }
        }
        let lower = default.to_ascii_lowercase();
        if is_call(&lower, "clock_timestamp") {
            if self.type_name == "timestamp with time zone" {
                return Ok(Grows::Clock);
            }
            return Err(format!(
                "is {} DEFAULT clock_timestamp(): wall-clock time repeats an hour when \
                 clocks go back",
                self.type_name
            ));
        }
        let starts = [
            "now()",
            "current_timestamp",
            "transaction_timestamp()",
            "localtimestamp",
        ];
        if starts.iter().any(|s| lower.starts_with(s)) {
            return Err(format!(
                "is set by DEFAULT {default}, the transaction's start time: equal for every row \
                 of one transaction, and not in commit order across transactions"
            ));
        }
        if lower.starts_with("statement_timestamp()") {
            return Err(format!(
                "is set by DEFAULT {default}, equal for every row of one statement"
            ));
        }
        if lower.contains("random") || lower.contains("uuid") {
            return Err(format!("is random (DEFAULT {default})"));
        }
        Err(match &self.default {
            Some(d) => {
                format!("is set by DEFAULT {d}, which walrelay cannot tell grows with each insert")
            }
            None => "has no DEFAULT: the writers set it, and walrelay cannot tell it grows with \
                     each insert"
                .to_string(),
        })
    }
}

/// Whether `expr` is exactly a call of `function` (its arguments aside).
fn is_call(expr: &str, function: &str) -> bool {
    expr.strip_prefix(function).is_some_and(|rest| {
        rest.starts_with('(') && rest.ends_with(')') && rest.matches(')').count() == 1
    })
}

/// Every column of `table` with its facts.
pub async fn facts(client: &Client, table: &OutboxTable) -> Result<BTreeMap<String, ColumnFacts>> {
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attidentity <> '', \
                    pg_get_expr(d.adbin, d.adrelid), s.name, s.seqcache, s.seqcycle \
             FROM pg_catalog.pg_attribute a \
             LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             LEFT JOIN LATERAL ( \
                 SELECT q.seqrelid::regclass::text AS name, q.seqcache, q.seqcycle \
                 FROM pg_catalog.pg_depend dep \
                 JOIN pg_catalog.pg_sequence q ON q.seqrelid = dep.objid \
                 WHERE a.attidentity <> '' AND dep.classid = 'pg_class'::regclass \
                   AND dep.refclassid = 'pg_class'::regclass AND dep.refobjid = a.attrelid \
                   AND dep.refobjsubid = a.attnum AND dep.deptype = 'i' \
                 UNION ALL \
                 SELECT q.seqrelid::regclass::text, q.seqcache, q.seqcycle \
                 FROM pg_catalog.pg_depend dep \
                 JOIN pg_catalog.pg_sequence q ON q.seqrelid = dep.refobjid \
                 WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid \
                   AND dep.refclassid = 'pg_class'::regclass \
                 LIMIT 1) s ON true \
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped",
            &[&table.relation.oid],
        )
        .await
        .map_err(|e| sql_error(format!("cannot read the columns of {}", table.table), e))?;
    Ok(rows
        .iter()
        .map(|r| {
            let sequence = r.get::<_, Option<String>>(4).map(|name| SequenceFacts {
                name,
                cache: r.get(5),
                cycle: r.get(6),
            });
            let facts = ColumnFacts {
                type_name: r.get(1),
                identity: r.get(2),
                default: r.get(3),
                sequence,
            };
            (r.get(0), facts)
        })
        .collect())
}

/// The ORDER BY list for `table`: `order_by` as given, else a default,
/// either one that keeps each key's events in the order they were written;
/// `key` is the Kafka key's column, `flag` the flag that sets the order.
pub async fn order_by(
    client: &Client,
    table: &OutboxTable,
    order_by: Option<&str>,
    key: &str,
    flag: &str,
) -> Result<String> {
    let columns = facts(client, table).await?;
    choose(table, &columns, order_by, key, flag)
}

/// The ORDER BY for `table`: `given` when it keeps each key's order, else
/// the safe default when none is given; otherwise an error with the fix.
/// `key` is the Kafka key's column, `flag` the flag that sets the order.
pub fn choose(
    table: &OutboxTable,
    columns: &BTreeMap<String, ColumnFacts>,
    given: Option<&str>,
    key: &str,
    flag: &str,
) -> Result<String> {
    let safe = default_order(table, columns);
    let given = given.map(str::trim).filter(|o| !o.is_empty());
    let (order, why) = match given {
        Some(order) => match judge(order, columns, key) {
            Ok(()) => return Ok(order.to_string()),
            Err(why) => (format!("{flag} {order:?}"), why),
        },
        None => match &safe {
            Some(order) => return Ok(order.clone()),
            None => (
                format!("without {flag}, the primary key"),
                match table.primary_key.first() {
                    Some(first) => judge(&quote_ident(first), columns, key)
                        .err()
                        .unwrap_or_default(),
                    None => format!("{} has no primary key", table.table),
                },
            ),
        },
    };
    let remedy = match safe {
        // Single quotes: pasted into a shell as printed.
        Some(safe) => format!(
            "order by {safe}, led by a column that grows with each insert: {flag} '{}', or \
             leave {flag} out, which picks it",
            safe.replace('\'', r"'\''")
        ),
        None => format!(
            "{table} has no column that grows with each insert: add one with ALTER TABLE {table} \
             ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY (it rewrites the table under an \
             ACCESS EXCLUSIVE lock, and numbers the rows already there in the order they lie on \
             disk, not the order they were written, so for those the order is a best guess), \
             then leave {flag} out",
            table = table.table.quoted()
        ),
    };
    Err(Error::permanent(format!(
        "{order} would not keep each key's events in the order they were written on {}: {why}. \
         Fix: {remedy} (docs/outbox-lifecycle.md, \"Order\")",
        table.table
    )))
}

/// The primary key when it grows with each insert; else a column filled by
/// a sequence; else a clock column, then the primary key to break ties.
fn default_order(table: &OutboxTable, columns: &BTreeMap<String, ColumnFacts>) -> Option<String> {
    let grows = |name: &String| columns.get(name).and_then(|c| c.grows().ok());
    if let [only] = &table.primary_key[..] {
        if grows(only).is_some() {
            return Some(quote_ident(only));
        }
    }
    let in_table = |kind| {
        table
            .relation
            .columns
            .iter()
            .map(|c| &c.name)
            .find(|name| grows(name) == Some(kind))
    };
    if let Some(sequence) = in_table(Grows::Sequence) {
        // A sequence hands out each value once: nothing to break ties.
        return Some(quote_ident(sequence));
    }
    let first = in_table(Grows::Clock)?;
    let mut order = vec![quote_ident(first)];
    order.extend(
        table
            .primary_key
            .iter()
            .filter(|c| *c != first)
            .map(|c| quote_ident(c)),
    );
    Some(order.join(", "))
}

/// Ok when `order` keeps each key's order (module doc, "The rule"), else
/// why not.
fn judge(
    order: &str,
    columns: &BTreeMap<String, ColumnFacts>,
    key: &str,
) -> std::result::Result<(), String> {
    for text in split_items(order) {
        let Some((name, descending)) = column_item(&text) else {
            return Err(format!(
                "{text:?} is not a column (walrelay cannot tell whether an expression grows \
                 with each insert)"
            ));
        };
        if name == key {
            continue;
        }
        let Some(facts) = columns.get(&name) else {
            return Err(format!("the table has no column {name:?}"));
        };
        return match (facts.grows(), descending) {
            (Ok(_), false) => Ok(()),
            (Ok(_), true) => Err(format!("{name} DESC sends each key's newest event first")),
            (Err(why), _) => Err(format!("{name} {why}")),
        };
    }
    Err("it names no column that grows with each insert".to_string())
}

/// The items of an ORDER BY list: split at the commas outside parentheses
/// and quotes.
fn split_items(order: &str) -> Vec<String> {
    let (mut items, mut item) = (Vec::new(), String::new());
    let (mut depth, mut quote) = (0i32, None);
    for c in order.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth -= 1,
            (None, ',') if depth == 0 => {
                items.push(item.trim().to_string());
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    items.push(item.trim().to_string());
    items
}

/// A bare column with an optional direction and NULLS placement: its name
/// as Postgres folds it, and whether it is descending. None for anything
/// else.
fn column_item(item: &str) -> Option<(String, bool)> {
    let (name, rest) = if let Some(quoted) = item.strip_prefix('"') {
        let mut name = String::new();
        let mut chars = quoted.char_indices().peekable();
        let end = loop {
            let (i, c) = chars.next()?;
            if c == '"' {
                if chars.peek().map(|&(_, c)| c) == Some('"') {
                    chars.next();
                } else {
                    break i + 1;
                }
            }
            name.push(c);
        };
        (name, &quoted[end..])
    } else {
        let end = item
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
            .unwrap_or(item.len());
        let name = &item[..end];
        if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return None;
        }
        (name.to_ascii_lowercase(), &item[end..])
    };
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let words: Vec<String> = rest
        .split_whitespace()
        .map(str::to_ascii_uppercase)
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let (descending, nulls) = match words.as_slice() {
        ["DESC", nulls @ ..] => (true, nulls),
        ["ASC", nulls @ ..] => (false, nulls),
        nulls => (false, nulls),
    };
    match nulls {
        [] | ["NULLS", "FIRST" | "LAST"] => Some((name, descending)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(type_name: &str, default: Option<&str>) -> ColumnFacts {
        ColumnFacts {
            type_name: type_name.into(),
            default: default.map(Into::into),
            ..ColumnFacts::default()
        }
    }

    fn sequence(cache: i64, cycle: bool) -> ColumnFacts {
        ColumnFacts {
            sequence: Some(SequenceFacts {
                name: "outbox_seq_seq".into(),
                cache,
                cycle,
            }),
            ..column("bigint", Some("nextval('outbox_seq_seq'::regclass)"))
        }
    }

    fn seeds(created_at: &str) -> BTreeMap<String, ColumnFacts> {
        BTreeMap::from([
            ("id".into(), column("uuid", None)),
            ("aggregate_id".into(), column("text", None)),
            ("event_type".into(), column("text", None)),
            (
                "created_at".into(),
                column("timestamp with time zone", Some(created_at)),
            ),
        ])
    }

    #[test]
    fn a_transaction_start_time_with_a_random_id_is_refused() {
        let cols = seeds("now()");
        let why = judge("created_at, id", &cols, "aggregate_id").unwrap_err();
        assert!(why.contains("transaction's start"), "{why}");
        assert!(judge("created_at", &seeds("CURRENT_TIMESTAMP"), "aggregate_id").is_err());
        assert!(judge("id", &cols, "aggregate_id")
            .unwrap_err()
            .contains("no DEFAULT"));
        assert!(judge("event_type", &cols, "aggregate_id").is_err());
    }

    #[test]
    fn a_clock_or_a_sequence_first_past_the_key_is_accepted() {
        let mut cols = seeds("clock_timestamp()");
        assert_eq!(judge("created_at, id", &cols, "aggregate_id"), Ok(()));
        assert_eq!(
            judge(
                "aggregate_id, \"created_at\" ASC NULLS LAST",
                &cols,
                "aggregate_id"
            ),
            Ok(())
        );
        assert!(judge("created_at DESC", &cols, "aggregate_id").is_err());
        assert!(judge("date_trunc('s', created_at), id", &cols, "aggregate_id").is_err());
        cols.insert("seq".into(), sequence(1, false));
        assert_eq!(judge("SEQ", &cols, "aggregate_id"), Ok(()));
        cols.insert("seq".into(), sequence(20, false));
        assert!(judge("seq", &cols, "aggregate_id")
            .unwrap_err()
            .contains("CACHE 20"));
        cols.insert("seq".into(), sequence(1, true));
        assert!(judge("seq", &cols, "aggregate_id")
            .unwrap_err()
            .contains("cycles"));
    }

    #[test]
    fn an_order_by_list_splits_at_top_level_commas_only() {
        assert_eq!(
            split_items("coalesce(a, b), \"x,y\" DESC, c"),
            vec!["coalesce(a, b)", "\"x,y\" DESC", "c"]
        );
        assert_eq!(column_item("\"x,y\" DESC"), Some(("x,y".into(), true)));
        assert_eq!(
            column_item("Created_At nulls first"),
            Some(("created_at".into(), false))
        );
        assert_eq!(column_item("outbox.created_at"), None);
        assert_eq!(column_item("created_at USING <"), None);
    }
}
