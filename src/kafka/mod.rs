//! Everything that talks to Kafka: the client configuration, the sink (an
//! idempotent producer with its delivery reports), topic creation through
//! the admin API, and reading a topic back over a time range (the audit,
//! and the demo's `tail`).

pub mod aliases;
pub mod client;
pub mod cyrus;
pub mod factory;
pub mod login;
pub mod msk_iam;
pub mod polled;
pub mod position;
pub mod producer;
pub mod properties;
pub mod reachability;
pub mod reader;
pub mod secrets;
pub mod tail;
pub mod topics;
pub mod transaction;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

pub use self::login::{is_login_refusal, LoginAdvice};
use crate::sink::{Refusal, Rejection};

/// The principal a broker sees walrelay as, for the ACL commands in its
/// messages: `User:` and -X sasl.username, or a placeholder (a TLS
/// certificate's principal is the broker's to derive). With Kerberos it is
/// the short name of -X sasl.kerberos.principal (librdkafka's default,
/// `kafkaclient`, if none), as the broker's default
/// `sasl.kerberos.principal.to.local.rules` maps `NAME/HOST@REALM` to `NAME`.
pub fn principal(config: &ClientConfig) -> String {
    if login::is_kerberos(config) {
        let kerberos = config
            .get("sasl.kerberos.principal")
            .unwrap_or("kafkaclient");
        let short = kerberos.split(['/', '@']).next().unwrap_or(kerberos);
        return format!("User:{short}");
    }
    config.get("sasl.username").map_or_else(
        || "User:WALRELAY_PRINCIPAL".into(),
        |user| format!("User:{user}"),
    )
}

/// The kafka-acls command that allows `principal` `operation` on `resource`
/// (e.g. `--topic NAME`, `--cluster`).
pub fn grant_command(principal: &str, operation: &str, resource: &str) -> String {
    format!(
        "kafka-acls --bootstrap-server BROKER --add --allow-principal {principal} \
         --operation {operation} {resource}"
    )
}

/// Sorts a produce or delivery error. An unknown topic is retriable: the next
/// session creates it again (or, without topic creation, finds it missing).
/// `partition` is the one the record asked for, if any.
pub fn classify(error: &KafkaError, partition: Option<i32>) -> Rejection {
    use RDKafkaErrorCode::*;
    match error.rdkafka_error_code() {
        // librdkafka's local error for a partition beyond the topic's count,
        // at send time or, before it knew the topic, in the delivery report.
        Some(UnknownPartition) => match partition {
            Some(partition) => Rejection::UnknownPartition(partition),
            None => Rejection::Poison,
        },
        // A broker refuses the whole batch for one record too large for the
        // topic (MessageBatchTooLarge is RECORD_LIST_TOO_LARGE): which one is
        // found by sending them alone.
        Some(MessageSizeTooLarge | MessageBatchTooLarge) => Rejection::Oversized,
        // The record itself: sending it again cannot help. InvalidMessage is
        // CORRUPT_MESSAGE (a CRC, or a compacted topic's missing key), and a
        // PolicyViolation is the broker's produce policy refusing it.
        Some(
            InvalidMessageSize | InvalidRecord | InvalidTopic | InvalidTimestamp | InvalidMessage
            | PolicyViolation,
        ) => Rejection::Poison,
        Some(
            TopicAuthorizationFailed
            | ClusterAuthorizationFailed
            | TransactionalIdAuthorizationFailed
            | UnsupportedForMessageFormat
            | UnsupportedCompressionType
            | InvalidRequiredAcks,
        ) => Rejection::Configuration,
        _ => Rejection::Retriable,
    }
}

/// A Kafka error as the sink's refusal.
pub fn refusal(error: &KafkaError, partition: Option<i32>) -> Refusal {
    Refusal {
        rejection: classify(error, partition),
        message: error.to_string(),
    }
}

/// A short stable label for metrics.
pub fn error_reason(error: &KafkaError) -> String {
    match error.rdkafka_error_code() {
        Some(code) => format!("{code:?}"),
        None => "Other".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_commands_name_the_sasl_user_the_kerberos_short_name_or_a_placeholder() {
        let mut config = ClientConfig::new();
        assert_eq!(principal(&config), "User:WALRELAY_PRINCIPAL");
        config.set("sasl.username", "relay");
        let command = grant_command(&principal(&config), "Write", "--topic t");
        assert!(
            command.contains("--allow-principal User:relay --operation Write --topic t"),
            "{command}"
        );
        config.set("security.protocol", "SASL_SSL");
        config.set("sasl.mechanism", "GSSAPI");
        assert_eq!(principal(&config), "User:kafkaclient");
        config.set(
            "sasl.kerberos.principal",
            "walrelay/relay-1.internal@EXAMPLE.COM",
        );
        assert_eq!(principal(&config), "User:walrelay");
    }

    #[test]
    fn record_errors_are_poison_size_errors_are_oversized_and_permission_errors_are_configuration()
    {
        let delivery = |code| KafkaError::MessageProduction(code);
        for code in [
            RDKafkaErrorCode::MessageSizeTooLarge,
            // RECORD_LIST_TOO_LARGE
            RDKafkaErrorCode::MessageBatchTooLarge,
        ] {
            assert_eq!(
                classify(&delivery(code), None),
                Rejection::Oversized,
                "{code:?}"
            );
        }
        for code in [
            RDKafkaErrorCode::InvalidTimestamp,
            RDKafkaErrorCode::UnknownPartition,
            // CORRUPT_MESSAGE, POLICY_VIOLATION
            RDKafkaErrorCode::InvalidMessage,
            RDKafkaErrorCode::PolicyViolation,
            RDKafkaErrorCode::InvalidRecord,
        ] {
            assert_eq!(
                classify(&delivery(code), None),
                Rejection::Poison,
                "{code:?}"
            );
        }
        assert_eq!(
            classify(&delivery(RDKafkaErrorCode::UnknownPartition), Some(7)),
            Rejection::UnknownPartition(7)
        );
        for code in [
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::ClusterAuthorizationFailed,
        ] {
            assert_eq!(
                classify(&delivery(code), None),
                Rejection::Configuration,
                "{code:?}"
            );
        }
        for code in [
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::NotEnoughReplicas,
            RDKafkaErrorCode::UnknownTopic,
        ] {
            assert_eq!(
                classify(&delivery(code), None),
                Rejection::Retriable,
                "{code:?}"
            );
        }
    }
}
