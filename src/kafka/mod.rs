//! Everything that talks to Kafka: the client configuration, the sink (an
//! idempotent producer with its delivery reports), and topic creation
//! through the admin API.

pub mod client;
pub mod producer;
pub mod reachability;
pub mod topics;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::sink::{Refusal, Rejection};

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
