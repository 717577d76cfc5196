//! SQL names: a schema-qualified table name and the quoting of identifiers
//! and literals, for statements walrelay builds and prints as fixes.

use std::fmt;
use std::str::FromStr;

/// A schema-qualified table name, exactly as spelled in the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    pub schema: String,
    pub name: String,
}

impl TableName {
    /// The name quoted for SQL.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

impl FromStr for TableName {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let (schema, name) = s.split_once('.').unwrap_or(("public", s));
        if schema.is_empty() || name.is_empty() || name.contains('.') {
            return Err(format!("expected schema.table or table, got {s:?}"));
        }
        Ok(TableName {
            schema: schema.to_string(),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

pub fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_without_schema_is_in_public() {
        let t: TableName = "events".parse().unwrap();
        assert_eq!((t.schema.as_str(), t.name.as_str()), ("public", "events"));
        assert!("a.b.c".parse::<TableName>().is_err());
    }

    #[test]
    fn quoting_doubles_embedded_quotes() {
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
