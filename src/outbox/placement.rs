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

/// As EventRouterConfigDefinition.parseAdditionalFieldsConfig reads one
/// entry (and AdditionalFieldsValidator checks it): Java's `split(":")`,
/// which drops trailing empty parts, each part trimmed (DBZ-7142: `a:header,
/// b:envelope` names column `b`), the placement's name in any case, two or
/// three parts (a partition's alias is read and unused).
impl FromStr for Placement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts: Vec<&str> = s.split(':').collect();
        while parts.len() > 1 && parts.last().is_some_and(|p| p.is_empty()) {
            parts.pop();
        }
        let parts: Vec<&str> = parts.iter().map(|p| p.trim()).collect();
        let malformed = || {
            format!(
                "{s:?}: expected column:header[:alias], column:envelope[:alias] or \
                 column:partition"
            )
        };
        let column = parts
            .first()
            .filter(|c| !c.is_empty())
            .ok_or_else(malformed)?;
        let alias = |i: usize| parts.get(i).map_or(column.to_string(), |a| a.to_string());
        if !matches!(parts.len(), 2 | 3) {
            return Err(malformed());
        }
        let target = match parts[1].to_ascii_lowercase().as_str() {
            "header" => Target::Header(alias(2)),
            "envelope" => Target::Envelope(alias(2)),
            "partition" => Target::Partition,
            _ => return Err(malformed()),
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
        assert!("x:somewhere".parse::<Placement>().is_err());
        assert!("x".parse::<Placement>().is_err());
        assert!("x:header:a:b".parse::<Placement>().is_err());
    }

    #[test]
    fn spaces_around_parts_are_trimmed_as_debezium_trims_them() {
        // DBZ-7142: "type:envelope:payloadType, aggregateid:envelope" names
        // the column aggregateid; parseAdditionalFieldsConfig trims each part.
        let p: Placement = " aggregateid : Envelope ".parse().unwrap();
        assert_eq!(p.column, "aggregateid");
        assert_eq!(p.target, Target::Envelope("aggregateid".into()));
        let p: Placement = "type:HEADER: eventType ".parse().unwrap();
        assert_eq!(p.target, Target::Header("eventType".into()));
        // Java's split drops a trailing empty part; a partition's alias is unused.
        let p: Placement = "type:header:".parse().unwrap();
        assert_eq!(p.target, Target::Header("type".into()));
        let p: Placement = "shard:partition:x".parse().unwrap();
        assert_eq!(p.target, Target::Partition);
    }
}
