//! Picks the Kafka topic for an event from its route-by value, as Debezium's
//! outbox event router does with its default regex.

const PLACEHOLDER: &str = "${routedByValue}";

/// Kafka's own limit on topic name length.
const MAX_TOPIC_LEN: usize = 249;

#[derive(Debug, Clone)]
pub struct Router {
    replacement: String,
}

impl Router {
    pub fn new(replacement: &str) -> Self {
        Router {
            replacement: replacement.to_string(),
        }
    }

    /// The topic for a route-by value, or why it cannot be a Kafka topic.
    pub fn topic(&self, routed_by_value: &str) -> Result<String, String> {
        let topic = self.replacement.replace(PLACEHOLDER, routed_by_value);
        validate_topic(&topic)?;
        Ok(topic)
    }
}

/// Kafka accepts ASCII letters, digits, '.', '_' and '-', up to 249 characters.
pub fn validate_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() || topic == "." || topic == ".." {
        return Err(format!("{topic:?} is not a legal Kafka topic name"));
    }
    if topic.len() > MAX_TOPIC_LEN {
        return Err(format!(
            "topic name of {} characters exceeds Kafka's limit of {MAX_TOPIC_LEN}",
            topic.len()
        ));
    }
    if let Some(bad) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "{topic:?} is not a legal Kafka topic name: {bad:?} is not allowed \
             (only letters, digits, '.', '_' and '-')"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_replacement_matches_debezium() {
        let router = Router::new("outbox.event.${routedByValue}");
        assert_eq!(
            router.topic("OrderPlaced").unwrap(),
            "outbox.event.OrderPlaced"
        );
    }

    #[test]
    fn illegal_topic_names_are_explained() {
        let router = Router::new("outbox.event.${routedByValue}");
        let err = router.topic("order placed").unwrap_err();
        assert!(err.contains("' '"), "{err}");
        assert!(router.topic(&"x".repeat(300)).is_err());
    }
}
