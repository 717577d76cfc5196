//! Picks the Kafka topic for an event from its route-by value, as Debezium's
//! outbox event router does through Kafka's `RegexRouter`: the value must
//! match `--topic-regex` whole (`Matcher.matches()`), and the topic is then
//! `Matcher.replaceFirst(--topic-replacement)`. A value the regex does not
//! match is the topic itself.
//!
//! The replacement is read once, at start-up, the way Java's
//! `Matcher.appendReplacement` reads it: `$n` (digits taken greedily while
//! the group exists), `${name}`, and `\` escaping the next character. What
//! Java would throw at the first event is refused at start-up instead.

use regex::{Captures, Regex};

/// Debezium's default `route.topic.regex`.
pub const DEFAULT_REGEX: &str = "(?<routedByValue>.*)";

/// Kafka's own limit on topic name length.
const MAX_TOPIC_LEN: usize = 249;

/// One piece of a parsed replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    /// A capturing group by index; a group that did not take part adds nothing.
    Group(usize),
}

#[derive(Debug, Clone)]
pub struct Router {
    /// For `matches()`: the whole value.
    whole: Regex,
    /// For `replaceFirst()`: the first match, which may be shorter than the value.
    first: Regex,
    template: Vec<Piece>,
    /// The replacement as given, for messages and `walrelay check`.
    replacement: String,
}

impl Router {
    pub fn new(regex: &str, replacement: &str) -> Result<Self, String> {
        let invalid =
            |e: regex::Error| format!("--topic-regex is not a valid regular expression: {e}");
        let whole = Regex::new(&format!("^(?:{regex})$")).map_err(invalid)?;
        let first = Regex::new(regex).map_err(invalid)?;
        let template = parse_replacement(replacement, &first)
            .map_err(|e| format!("--topic-replacement {replacement:?}: {e}"))?;
        Ok(Router {
            whole,
            first,
            template,
            replacement: replacement.to_string(),
        })
    }

    /// The replacement as given (`--topic-replacement`).
    pub fn replacement(&self) -> &str {
        &self.replacement
    }

    /// The regex as given (`--topic-regex`).
    pub fn regex(&self) -> &str {
        self.first.as_str()
    }

    /// The topic for a route-by value, or why it cannot be a Kafka topic.
    pub fn topic(&self, routed_by_value: &str) -> Result<String, String> {
        let topic = match self.replace_first(routed_by_value) {
            Some(topic) => topic,
            None => routed_by_value.to_string(),
        };
        validate_topic(&topic)?;
        Ok(topic)
    }

    /// `matches()` then `replaceFirst()`: None when the value does not match whole.
    fn replace_first(&self, value: &str) -> Option<String> {
        if !self.whole.is_match(value) {
            return None;
        }
        let captures = self.first.captures(value)?;
        let found = captures.get(0)?;
        let mut out = String::with_capacity(value.len() + 16);
        out.push_str(&value[..found.start()]);
        self.expand(&captures, &mut out);
        out.push_str(&value[found.end()..]);
        Some(out)
    }

    fn expand(&self, captures: &Captures<'_>, out: &mut String) {
        for piece in &self.template {
            match piece {
                Piece::Literal(text) => out.push_str(text),
                Piece::Group(index) => {
                    if let Some(group) = captures.get(*index) {
                        out.push_str(group.as_str());
                    }
                }
            }
        }
    }
}

/// Reads a replacement as `java.util.regex.Matcher.appendReplacement` does
/// (OpenJDK's `appendExpandedReplacement`), with the same errors.
fn parse_replacement(replacement: &str, regex: &Regex) -> Result<Vec<Piece>, String> {
    // Java's groupCount() leaves out group 0.
    let group_count = regex.captures_len() - 1;
    let chars: Vec<char> = replacement.chars().collect();
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                let escaped = chars.get(i + 1).ok_or(
                    "a '\\' at the end escapes nothing (Java: \"character to be escaped is \
                     missing\"); write '\\\\' for a backslash",
                )?;
                literal.push(*escaped);
                i += 2;
            }
            '$' => {
                i += 1;
                let index = match chars.get(i) {
                    None => {
                        return Err(
                            "a '$' at the end names no group (Java: \"Illegal group \
                                    reference: group index is missing\"); write '\\$' for a dollar"
                                .into(),
                        )
                    }
                    Some('{') => {
                        let start = i + 1;
                        let mut end = start;
                        while chars.get(end).is_some_and(|c| c.is_ascii_alphanumeric()) {
                            end += 1;
                        }
                        let name: String = chars[start..end].iter().collect();
                        if name.is_empty() {
                            return Err("\"${}\" names no group (Java: \"named capturing group \
                                        has 0 length name\")"
                                .into());
                        }
                        if chars.get(end) != Some(&'}') {
                            return Err(format!(
                                "\"${{{name}\" is not closed by '}}' (Java: \"named capturing \
                                 group is missing trailing '}}'\"); group names are letters and \
                                 digits"
                            ));
                        }
                        if name.starts_with(|c: char| c.is_ascii_digit()) {
                            return Err(format!(
                                "group name {{{name}}} starts with a digit; use ${name} for a \
                                 numbered group"
                            ));
                        }
                        i = end + 1;
                        regex
                            .capture_names()
                            .position(|n| n == Some(name.as_str()))
                            .ok_or_else(|| {
                                format!(
                                    "--topic-regex has no group named {name:?} (Java: \"No \
                                     group with name {{{name}}}\")"
                                )
                            })?
                    }
                    Some(c) => {
                        // The first digit is always a group; more digits join
                        // it only while the group number exists.
                        let mut index = c.to_digit(10).ok_or_else(|| {
                            format!(
                                "'$' followed by {c:?} is not a group reference (Java: \"Illegal \
                                 group reference\"); write '\\$' for a dollar"
                            )
                        })? as usize;
                        i += 1;
                        while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                            let longer = index * 10 + d as usize;
                            if longer > group_count {
                                break;
                            }
                            index = longer;
                            i += 1;
                        }
                        if index > group_count {
                            return Err(format!(
                                "${index} refers to a group --topic-regex does not have (it has \
                                 {group_count}; Java: \"No group {index}\")"
                            ));
                        }
                        index
                    }
                };
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Group(index));
            }
            c => {
                literal.push(c);
                i += 1;
            }
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    Ok(pieces)
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

    // Golden tests of the replacement syntax. Expected values follow the
    // javadoc of java.util.regex.Matcher.appendReplacement (openjdk/jdk,
    // src/java.base/share/classes/java/util/regex/Matcher.java): "the first
    // number after the $ is always treated as part of the group reference.
    // Subsequent numbers are incorporated into g if they would form a legal
    // group reference"; "If the second group matched the string "foo" ...
    // "$2bar" would cause "foobar" to be appended"; "A dollar sign ($) may be
    // included as a literal ... by preceding it with a backslash (\$)"; and
    // the exceptions its appendExpandedReplacement throws.

    #[test]
    fn a_group_number_is_followed_by_literal_text_as_in_java() {
        let router = Router::new("(x)(foo)", "$2bar").unwrap();
        assert_eq!(router.topic("xfoo").unwrap(), "foobar");
    }

    #[test]
    fn group_digits_are_read_greedily_only_while_the_group_exists() {
        // One group: "$12" is group 1 followed by "2".
        let one = Router::new("(a+)", "t$12").unwrap();
        assert_eq!(one.topic("aa").unwrap(), "taa2");
        // Twelve groups: "$12" is group 12.
        let regex = "(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)(l)";
        let twelve = Router::new(regex, "t$12").unwrap();
        assert_eq!(twelve.topic("abcdefghijkl").unwrap(), "tl");
        // "$1_v2": group 1, then the text "_v2".
        let versioned = Router::new("(?<routedByValue>.*)", "$1_v2").unwrap();
        assert_eq!(versioned.topic("order").unwrap(), "order_v2");
    }

    #[test]
    fn named_groups_and_escapes_read_as_in_java() {
        let router = Router::new(
            r"(?<domain>[a-z]+)\.(?<kind>[a-z]+)",
            r"${domain}.\$.\\.${kind}",
        )
        .unwrap();
        // "\$" is a dollar, "\\" a backslash; the topic check then refuses them,
        // which proves the replacement produced them.
        let err = router.topic("billing.invoice").unwrap_err();
        assert!(err.contains(r#""billing.$.\\.invoice""#), "{err}");
        let escaped = Router::new("(.*)", r"\o\u\t.$1").unwrap();
        assert_eq!(escaped.topic("x").unwrap(), "out.x");
    }

    #[test]
    fn a_group_that_did_not_take_part_adds_nothing() {
        let router = Router::new("(a)?(b)", "t.$1$2").unwrap();
        assert_eq!(router.topic("b").unwrap(), "t.b");
    }

    #[test]
    fn replacements_java_would_throw_on_are_refused_at_start_up() {
        let refused = |regex: &str, replacement: &str, needle: &str| {
            let err = Router::new(regex, replacement).unwrap_err();
            assert!(err.contains(needle), "{replacement:?}: {err}");
        };
        refused("(.*)", "topic\\", "character to be escaped is missing");
        refused("(.*)", "topic$", "group index is missing");
        refused("(.*)", "price$USD", "Illegal group reference");
        refused("(.*)", "t.$2", "No group 2");
        refused(
            "(.*)",
            "t.${routedByValue}",
            "No group with name {routedByValue}",
        );
        refused("(?<a_b>.*)", "t.${a_b}", "missing trailing '}'");
        refused("(.*)", "t.${}", "0 length name");
        refused("(.*)", "t.${1}", "starts with a digit");
    }

    #[test]
    fn the_first_match_is_replaced_and_the_rest_of_the_value_kept() {
        // matches() accepts "ab" through the second alternative, but
        // replaceFirst() replaces find()'s first match, "a", and keeps "b".
        let router = Router::new("a|ab", "x").unwrap();
        assert_eq!(router.topic("ab").unwrap(), "xb");
    }

    #[test]
    fn illegal_topic_names_are_explained() {
        let router = default_router();
        let err = router.topic("order placed").unwrap_err();
        assert!(err.contains("' '"), "{err}");
        assert!(router.topic(&"x".repeat(300)).is_err());
    }
}
