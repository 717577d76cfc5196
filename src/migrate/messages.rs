//! What becomes of `pg_logical_emit_message` records at the switch: the
//! connector publishes them beside the router's events, walrelay run does
//! not, so migrate says so instead of leaving a topic to dry up unnoticed.
//!
//! Debezium 3.6.1.Final (debezium/debezium, debezium-connector-postgres/
//! src/main/java/io/debezium/connector/postgresql/): pgoutput is asked for
//! messages on PostgreSQL 14+ (connection/pgoutput/PgOutputMessageDecoder
//! .java:247-249, `messages` true); every message whose prefix passes
//! `message.prefix.include.list`/`exclude.list` (LogicalDecodingMessageFilter
//! .java:22-31, all prefixes when neither is set; PostgresEventDispatcher
//! .java:66) becomes a record on `<topic.prefix>.message`
//! (LogicalDecodingMessageMonitor.java:46,74,108) with key `{prefix}` and a
//! value named `io.debezium.connector.postgresql.MessageValue`
//! (PostgresSchemaFactory.java:32,58-68): `op` "m", `ts_ms`, `source`,
//! `transaction`, `message{prefix, content}`. A transactional message comes
//! when its transaction commits, a non-transactional one at once, even when
//! its transaction rolls back (PgOutputMessageDecoder.java:639-650). The
//! outbox router passes it on untouched: its schema name does not end in
//! `.Envelope` (debezium-connect-plugins/.../transforms/outbox/
//! EventRouterDelegate.java:102-106, SmtManager.isValidEnvelope at
//! transforms/SmtManager.java:46-54).

use crate::error::{Error, Result};

const INCLUDE: &str = "message.prefix.include.list";
const EXCLUDE: &str = "message.prefix.exclude.list";

/// The options read here, so that no generic note repeats them.
pub const KEYS: [&str; 2] = [INCLUDE, EXCLUDE];

/// The note on the connector's message records, none when it publishes
/// none; an error when Debezium refuses the pair of options.
pub fn note(
    include: Option<&str>,
    exclude: Option<&str>,
    topic_prefix: Option<&str>,
) -> Result<Option<String>> {
    let include = include.map(str::trim).filter(|v| !v.is_empty());
    let exclude = exclude.map(str::trim).filter(|v| !v.is_empty());
    let which = match (include, exclude) {
        // PostgresConnectorConfig.validateLogicalDecodingMessageExcludeList.
        (Some(_), Some(_)) => {
            return Err(Error::permanent(format!(
                "{INCLUDE} and {EXCLUDE} are both set: Debezium refuses the pair (\"… is \
                 already specified\") and the connector never starts; keep one"
            )))
        }
        (None, Some(".*")) => return Ok(None),
        (Some(list), None) => {
            format!("{INCLUDE}={list}: Debezium publishes the messages whose prefix it matches")
        }
        (None, Some(list)) => {
            format!("{EXCLUDE}={list}: Debezium publishes the messages of every other prefix")
        }
        (None, None) => "logical decoding messages: Debezium publishes every message of the \
                         database, whatever its prefix,"
            .to_string(),
    };
    let topic = topic_prefix.map_or("<topic.prefix>.message".to_string(), |p| {
        format!("{p}.message")
    });
    Ok(Some(format!(
        "{which} (pg_logical_emit_message on PostgreSQL 14+: a transactional one when its \
         transaction commits, a non-transactional one at once, even if its transaction rolls \
         back) to topic {topic}, as its own record (key {{prefix}}, value op \"m\" with source, \
         prefix and content) that the outbox router passes on unrouted; walrelay run publishes \
         none of them, so nothing reaches {topic} after the switch: move its consumers first \
         ({EXCLUDE}=.* on the connector shows whether anything depends on it). If the messages \
         are outbox events written as walrelay's document (sql/outbox_messages.sql, \
         transactional only), a second walrelay with --source messages --message-prefix PREFIX \
         routes them like rows"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prefix_is_published_by_debezium_unless_all_are_excluded() {
        let all = note(None, None, Some("orders")).unwrap().unwrap();
        assert!(all.contains("every message"), "{all}");
        assert!(all.contains("orders.message"), "{all}");
        assert!(all.contains("walrelay run publishes none"), "{all}");
        assert!(note(None, Some(" .* "), Some("orders")).unwrap().is_none());
        let unnamed = note(None, None, None).unwrap().unwrap();
        assert!(unnamed.contains("<topic.prefix>.message"), "{unnamed}");
    }

    #[test]
    fn a_prefix_list_is_named_with_the_fix() {
        let some = note(Some("app,audit"), None, Some("orders"))
            .unwrap()
            .unwrap();
        assert!(
            some.contains("message.prefix.include.list=app,audit")
                && some.contains("--source messages --message-prefix"),
            "{some}"
        );
        let other = note(Some(""), Some("noise"), Some("orders"))
            .unwrap()
            .unwrap();
        assert!(other.contains("every other prefix"), "{other}");
        let err = note(Some("app"), Some("noise"), None).unwrap_err();
        assert!(err.to_string().contains("both set"), "{err}");
    }
}
