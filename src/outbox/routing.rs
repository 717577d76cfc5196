//! Picks the Kafka topic for an event from its route-by value, as Debezium's
//! outbox event router does: `--topic-regex` must match the whole value, and
//! `--topic-replacement` may use its groups (`${routedByValue}`, `$1`). A
//! value the regex does not match is the topic itself, as in Debezium.

use regex::Regex;

/// Debezium's default `route.topic.regex`.
pub const DEFAULT_REGEX: &str = "(?<routedByValue>.*)";

/// Kafka's own limit on topic name length.
const MAX_TOPIC_LEN: usize = 249;

#[derive(Debug, Clone)]
pub struct Router {
    regex: Regex,
    replacement: String,
}

impl Router {
    pub fn new(regex: &str, replacement: &str) -> Result<Self, String> {
        // Java's Matcher.matches() is a whole-string match.
        let regex = Regex::new(&format!("^(?:{regex})$"))
            .map_err(|e| format!("--topic-regex is not a valid regular expression: {e}"))?;
        Ok(Router {
            regex,
            replacement: replacement.to_string(),
        })
    }

    /// The topic for a route-by value, or why it cannot be a Kafka topic.
    pub fn topic(&self, routed_by_value: &str) -> Result<String, String> {
        let topic = match self.regex.captures(routed_by_value) {
            Some(captures) => {
                let mut topic = String::new();
                captures.expand(&self.replacement, &mut topic);
                topic
            }
            None => routed_by_value.to_string(),
        };
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

    fn default_router() -> Router {
        Router::new(DEFAULT_REGEX, "outbox.event.${routedByValue}").unwrap()
    }

    #[test]
    fn default_replacement_matches_debezium() {
        assert_eq!(
            default_router().topic("OrderPlaced").unwrap(),
            "outbox.event.OrderPlaced"
        );
    }

    #[test]
    fn regex_groups_can_be_used_in_the_replacement() {
        let router =
            Router::new(r"(?<domain>[a-z]+)\.(?<event>\w+)", "${domain}-events.$2").unwrap();
        assert_eq!(
            router.topic("orders.Placed").unwrap(),
            "orders-events.Placed"
        );
        // No match: the value itself is the topic, as in Debezium.
        assert_eq!(router.topic("Standalone").unwrap(), "Standalone");
        assert!(Router::new("(unclosed", "x").is_err());
    }

    #[test]
    fn illegal_topic_names_are_explained() {
        let router = default_router();
        let err = router.topic("order placed").unwrap_err();
        assert!(err.contains("' '"), "{err}");
        assert!(router.topic(&"x".repeat(300)).is_err());
    }
}
