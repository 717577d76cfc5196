//! Everything that talks to Kafka: the idempotent producer with its delivery
//! reports, and topic creation through the admin API.

pub mod producer;
pub mod topics;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// What a refusal by Kafka (or by librdkafka before sending) means for walrelay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The record itself is the problem: no retry can fix it, so it goes to
    /// the poison policy.
    Poison,
    /// Configuration or permissions: every record would fail the same way, so
    /// walrelay halts even under `--on-poison dead-letter`.
    Configuration,
    /// Worth another attempt: the session starts over from the slot.
    Retriable,
}

/// Sorts a produce or delivery error. An unknown topic is retriable: the next
/// session creates it again (or, without topic creation, finds it missing).
pub fn classify(error: &KafkaError) -> Rejection {
    use RDKafkaErrorCode::*;
    match error.rdkafka_error_code() {
        Some(
            MessageSizeTooLarge
            | InvalidMessageSize
            | InvalidRecord
            | InvalidTopic
            | MessageBatchTooLarge
            | InvalidTimestamp
            // librdkafka's local error for a partition beyond the topic's count,
            // at send time or, before it knew the topic, in the delivery report.
            | UnknownPartition,
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
    fn record_errors_are_poison_and_permission_errors_are_configuration() {
        let delivery = |code| KafkaError::MessageProduction(code);
        for code in [
            RDKafkaErrorCode::InvalidTimestamp,
            RDKafkaErrorCode::UnknownPartition,
            RDKafkaErrorCode::MessageSizeTooLarge,
        ] {
            assert_eq!(classify(&delivery(code)), Rejection::Poison, "{code:?}");
        }
        for code in [
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::ClusterAuthorizationFailed,
        ] {
            assert_eq!(
                classify(&delivery(code)),
                Rejection::Configuration,
                "{code:?}"
            );
        }
        for code in [
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::NotEnoughReplicas,
            RDKafkaErrorCode::UnknownTopic,
        ] {
            assert_eq!(classify(&delivery(code)), Rejection::Retriable, "{code:?}");
        }
    }
}
