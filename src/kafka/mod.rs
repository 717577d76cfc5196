//! Everything that talks to Kafka: the client configuration, the sink (an
//! idempotent producer with its delivery reports), and topic creation
//! through the admin API.

pub mod client;
pub mod position;
pub mod producer;
pub mod reachability;
pub mod topics;
pub mod transaction;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::error::Error;
use crate::sink::{Refusal, Rejection};

/// The principal a broker sees walrelay as, for the ACL commands in its
/// messages: `User:` and -X sasl.username, or a placeholder (a TLS
/// certificate's principal is the broker's to derive).
pub fn principal(config: &ClientConfig) -> String {
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

/// What to check when the broker refuses walrelay's login.
pub const LOGIN_FIX: &str = "check -X sasl.username and -X sasl.password (a user the broker \
     knows, with its current password), and that -X security.protocol (SASL_PLAINTEXT or \
     SASL_SSL) and -X sasl.mechanism (e.g. SCRAM-SHA-512) match the broker's listener";

/// Whether a client error is the broker refusing the login (SASL): a wrong
/// user or password, or a mechanism the listener does not enable.
/// librdkafka retries it forever, and says so only to the client context.
pub fn is_login_refusal(error: &KafkaError) -> bool {
    error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication)
}

/// A refused login as the permanent error it is: retrying cannot fix
/// credentials. `reason` is librdkafka's, which names the mechanism, never
/// the password.
pub fn login_refused(reason: &str) -> Error {
    Error::permanent(format!(
        "Kafka refused walrelay's login (authentication failed: {reason}); walrelay stopped: \
         {LOGIN_FIX}"
    ))
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
    fn acl_commands_name_the_sasl_user_or_a_placeholder() {
        let mut config = ClientConfig::new();
        assert_eq!(principal(&config), "User:WALRELAY_PRINCIPAL");
        config.set("sasl.username", "relay");
        let command = grant_command(&principal(&config), "Write", "--topic t");
        assert!(
            command.contains("--allow-principal User:relay --operation Write --topic t"),
            "{command}"
        );
    }

    #[test]
    fn a_refused_login_is_permanent_and_names_the_properties_to_check() {
        let refused = KafkaError::Global(RDKafkaErrorCode::Authentication);
        assert!(is_login_refusal(&refused));
        assert!(!is_login_refusal(&KafkaError::Global(
            RDKafkaErrorCode::AllBrokersDown
        )));
        let error = login_refused("SASL authentication error");
        assert!(!error.is_transient());
        for property in [
            "-X sasl.username",
            "-X sasl.password",
            "-X security.protocol",
            "-X sasl.mechanism",
        ] {
            assert!(error.report().contains(property), "{}", error.report());
        }
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
