//! Everything that talks to Kafka: the idempotent producer with its delivery
//! reports, and topic creation through the admin API.

pub mod producer;
pub mod topics;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Delivery errors that no retry can fix: the event itself, or a missing
/// permission, is the problem. An unknown topic is not among them: the next
/// session creates it again.
pub fn is_permanent_rejection(error: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        error.rdkafka_error_code(),
        Some(
            MessageSizeTooLarge
                | InvalidMessageSize
                | InvalidRecord
                | InvalidTopic
                | MessageBatchTooLarge
                | TopicAuthorizationFailed
                | ClusterAuthorizationFailed
                | UnsupportedForMessageFormat
                | InvalidRequiredAcks
        )
    )
}

/// Rejections because the message is too large: a dead-letter copy must leave the value out.
pub fn is_size_rejection(error: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        error.rdkafka_error_code(),
        Some(MessageSizeTooLarge | InvalidMessageSize | MessageBatchTooLarge)
    )
}

/// A short stable label for metrics.
pub fn error_reason(error: &KafkaError) -> String {
    match error.rdkafka_error_code() {
        Some(code) => format!("{code:?}"),
        None => "Other".into(),
    }
}
