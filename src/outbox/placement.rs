//! Debezium's `table.fields.additional.placement`: extra outbox columns
//! copied into a header, into an envelope around the payload, or used as the
//! partition number (values are written by `column` and `connect`).

use std::str::FromStr;

/// Postgres type OIDs walrelay treats specially.
#[allow(dead_code)] // json and jsonb are named for readers and tests.
pub mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const JSON: u32 = 114;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const JSONB: u32 = 3802;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Header(String),
    Envelope(String),
    Partition,
}

/// One `column:header[:alias]`, `column:envelope[:alias]` or `column:partition`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub column: String,
    pub target: Target,
}

impl FromStr for Placement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let column = parts.first().filter(|c| !c.is_empty()).ok_or_else(|| {
            format!("{s:?}: expected column:header[:alias], column:envelope[:alias] or column:partition")
        })?;
        let alias = |i: usize| parts.get(i).map_or(column.to_string(), |a| a.to_string());
        let target = match (parts.get(1).copied(), parts.len()) {
            (Some("header"), 2 | 3) => Target::Header(alias(2)),
            (Some("envelope"), 2 | 3) => Target::Envelope(alias(2)),
            (Some("partition"), 2) => Target::Partition,
            _ => {
                return Err(format!(
                    "{s:?}: expected column:header[:alias], column:envelope[:alias] or column:partition"
                ))
            }
        };
        Ok(Placement {
            column: column.to_string(),
            target,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_parse_as_debezium_writes_them() {
        let p: Placement = "event_type:header:eventType".parse().unwrap();
        assert_eq!(p.target, Target::Header("eventType".into()));
        let p: Placement = "aggregate_type:envelope".parse().unwrap();
        assert_eq!(p.target, Target::Envelope("aggregate_type".into()));
        let p: Placement = "shard:partition".parse().unwrap();
        assert_eq!((p.column.as_str(), p.target), ("shard", Target::Partition));
        assert!("shard:partition:x".parse::<Placement>().is_err());
        assert!("x:somewhere".parse::<Placement>().is_err());
    }
}
