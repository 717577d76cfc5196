//! The writer's trace context, stored in the outbox row, as W3C Trace Context
//! Kafka headers (Debezium's `tracing.span.context.field`).
//!
//! The column holds a `java.util.Properties` text, as Debezium's Quarkus
//! outbox extension writes it (`Properties.store`, so a `#date` comment line
//! first): `traceparent=00-<trace-id>-<span-id>-<flags>` and optionally
//! `tracestate=...`. Debezium's router extracts that context with
//! OpenTelemetry's W3C propagator and injects a child span's context into the
//! record headers (TracingSpanUtil.traceRecord). walrelay has no tracer, so it
//! passes the writer's `traceparent` and `tracestate` through unchanged: the
//! consumer's span becomes a child of the writer's span, in the same trace.

use std::borrow::Cow;

use bytes::Bytes;

use crate::sink::Header;

/// A validated W3C trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: String,
    /// None when absent, empty or invalid (an invalid tracestate must not
    /// affect the traceparent: W3C Trace Context, "Tracestate Header").
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context in a stored column or message field. `Ok(None)`: no
    /// `traceparent` in it. `Err`: text that is not a context, to be
    /// reported; the event is published all the same, without trace headers.
    pub fn parse(stored: &[u8]) -> Result<Option<TraceContext>, String> {
        let text = std::str::from_utf8(stored)
            .map_err(|_| "the tracing span context is not UTF-8 text".to_string())?;
        let properties = load_properties(text)?;
        // Properties keeps the last value of a repeated key.
        let get = |name: &str| {
            properties
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.trim_matches([' ', '\t']))
        };
        let Some(traceparent) = get("traceparent") else {
            return Ok(None);
        };
        check_traceparent(traceparent)?;
        Ok(Some(TraceContext {
            traceparent: traceparent.to_string(),
            tracestate: get("tracestate")
                .filter(|s| !s.is_empty() && valid_tracestate(s))
                .map(str::to_string),
        }))
    }

    /// The Kafka headers: `traceparent`, then `tracestate` when there is one.
    pub fn headers(&self) -> impl Iterator<Item = Header> + '_ {
        let parent = (Cow::Borrowed("traceparent"), Some(self.traceparent.clone()));
        let state = self
            .tracestate
            .clone()
            .map(|s| (Cow::Borrowed("tracestate"), Some(s)));
        std::iter::once(parent)
            .chain(state)
            .map(|(name, value)| (name, value.map(Bytes::from)))
    }
}

/// `traceparent` per W3C Trace Context, "traceparent Header Field Values"
/// and "Versioning of traceparent": `version-traceid-parentid-flags` in
/// lowercase hex, version `ff` forbidden, ids not all zero; a version above
/// 00 may carry more fields after a dash.
fn check_traceparent(value: &str) -> Result<(), String> {
    let fail = |why: &str| {
        Err(format!(
            "the traceparent {value:?} is not a W3C traceparent \
             (00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>): {why}"
        ))
    };
    let lower_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let b = value.as_bytes();
    if b.len() < 55 {
        return fail("too short");
    }
    if !b[..55].is_ascii() {
        return fail("a field is not lowercase hex");
    }
    let (version, trace_id, parent_id, flags) =
        (&value[..2], &value[3..35], &value[36..52], &value[53..55]);
    if [b[2], b[35], b[52]] != [b'-'; 3] {
        return fail("the fields are not separated by dashes");
    }
    if ![version, trace_id, parent_id, flags]
        .iter()
        .all(|f| lower_hex(f))
    {
        return fail("a field is not lowercase hex");
    }
    if version == "ff" {
        return fail("version ff is forbidden");
    }
    if version == "00" && b.len() != 55 {
        return fail("version 00 has exactly four fields");
    }
    if b.len() > 55 && b[55] != b'-' {
        return fail("the flags are not followed by a dash");
    }
    if trace_id.bytes().all(|c| c == b'0') {
        return fail("the trace-id is all zeros");
    }
    if parent_id.bytes().all(|c| c == b'0') {
        return fail("the parent-id is all zeros");
    }
    Ok(())
}

/// `tracestate` per W3C Trace Context, "tracestate Header Field Values": at
/// most 32 comma-separated `key=value` members (empty ones allowed); a key of
/// lowercase letters, digits and `_-*/@` starting with a letter or digit; a
/// value of printable ASCII without `,` and `=`, not ending in a space.
fn valid_tracestate(value: &str) -> bool {
    let members: Vec<&str> = value
        .split(',')
        .map(|m| m.trim_matches([' ', '\t']))
        .collect();
    members.len() <= 32
        && members.iter().filter(|m| !m.is_empty()).all(|member| {
            let Some((key, val)) = member.split_once('=') else {
                return false;
            };
            let key_ok = key.len() <= 256
                && key
                    .bytes()
                    .next()
                    .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && key
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-*/@".contains(&c));
            let val_ok = !val.is_empty()
                && val.len() <= 256
                && !val.ends_with(' ')
                && val
                    .bytes()
                    .all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=');
            key_ok && val_ok
        })
}

/// Key-value pairs of a `java.util.Properties` text, as `Properties.load`
/// reads it: `#` and `!` comment lines, `=`, `:` or blanks between key and
/// value, backslash escapes (`\t`, `\n`, `\r`, `\f`, `\uXXXX`, any other
/// character as itself) and a trailing backslash continuing the line.
fn load_properties(text: &str) -> Result<Vec<(String, String)>, String> {
    let blank = |c: char| matches!(c, ' ' | '\t' | '\x0c');
    let mut pairs = Vec::new();
    let text = text.replace("\r\n", "\n");
    let mut lines = text.split(['\n', '\r']);
    while let Some(first) = lines.next() {
        let first = first.trim_start_matches(blank);
        if first.is_empty() || first.starts_with(['#', '!']) {
            continue;
        }
        // Join continued lines: an odd number of trailing backslashes.
        let mut logical = String::from(first);
        while logical.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1 {
            logical.pop();
            match lines.next() {
                Some(next) => logical.push_str(next.trim_start_matches(blank)),
                None => break,
            }
        }
        // The key ends at the first unescaped '=', ':' or blank.
        let chars: Vec<char> = logical.chars().collect();
        let mut i = 0;
        while i < chars.len() && !(chars[i] == '=' || chars[i] == ':' || blank(chars[i])) {
            i += if chars[i] == '\\' { 2 } else { 1 };
        }
        let key_end = i.min(chars.len());
        let mut j = key_end;
        while j < chars.len() && blank(chars[j]) {
            j += 1;
        }
        if j < chars.len() && (chars[j] == '=' || chars[j] == ':') {
            j += 1;
            while j < chars.len() && blank(chars[j]) {
                j += 1;
            }
        }
        let key: String = chars[..key_end].iter().collect();
        let value: String = chars[j..].iter().collect();
        pairs.push((unescape(&key)?, unescape(&value)?));
    }
    Ok(pairs)
}

/// Properties' escapes; `\uXXXX` is a UTF-16 unit, so surrogate pairs join.
fn unescape(text: &str) -> Result<String, String> {
    let mut units: Vec<u16> = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let c = match c {
            '\\' => {
                match chars.next() {
                    Some('t') => '\t',
                    Some('n') => '\n',
                    Some('r') => '\r',
                    Some('f') => '\x0c',
                    Some('u') => {
                        let hex: String = chars.by_ref().take(4).collect();
                        let unit = (hex.len() == 4)
                        .then(|| u16::from_str_radix(&hex, 16).ok())
                        .flatten()
                        .ok_or_else(|| {
                            format!("the tracing span context has a malformed \\uxxxx escape {hex:?}")
                        })?;
                        units.push(unit);
                        continue;
                    }
                    Some(other) => other,
                    None => break,
                }
            }
            c => c,
        };
        let mut buf = [0u16; 2];
        units.extend_from_slice(c.encode_utf16(&mut buf));
    }
    Ok(String::from_utf16_lossy(&units))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The W3C example (Trace Context, "Examples of HTTP traceparent
    /// Headers"), also used by Debezium's ActivateTracingSpanTest.
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn parse(text: &str) -> Result<Option<TraceContext>, String> {
        TraceContext::parse(text.as_bytes())
    }

    #[test]
    fn the_quarkus_extension_text_with_its_date_comment_gives_the_traceparent() {
        // Properties.store writes a date comment, then the escaped pairs.
        let text = format!("#Mon Nov 30 13:50:37 UTC 2026\r\ntraceparent={PARENT}\r\n");
        let context = parse(&text).unwrap().unwrap();
        assert_eq!(context.traceparent, PARENT);
        assert_eq!(context.tracestate, None);
        let headers: Vec<Header> = context.headers().collect();
        assert_eq!(
            headers,
            vec![(Cow::Borrowed("traceparent"), Some(Bytes::from(PARENT)))]
        );
    }

    #[test]
    fn tracestate_is_unescaped_and_sent_after_the_traceparent() {
        // Properties.store escapes '=' and ':' in values.
        let text = format!(
            "traceparent : {PARENT}\ntracestate=rojo\\=00f067aa0ba902b7,congo\\=t61rcWkgMzE\n"
        );
        let context = parse(&text).unwrap().unwrap();
        assert_eq!(
            context.tracestate.as_deref(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        let names: Vec<String> = context.headers().map(|(n, _)| n.into_owned()).collect();
        assert_eq!(names, ["traceparent", "tracestate"]);
    }

    #[test]
    fn properties_escapes_continuations_and_repeated_keys_follow_java() {
        let text = "! comment\n  trace\\\n    parent=00-4bf92f3577b34da6a3ce929d0e0e4736-\\\n   00f067aa0ba902b7-01\ntraceparent\\u003d=x\n";
        let pairs = load_properties(text).unwrap();
        assert_eq!(pairs[0], ("traceparent".into(), PARENT.into()));
        assert_eq!(pairs[1], ("traceparent=".into(), "x".into()));
        let later = format!("traceparent=00-1-2-3\ntraceparent={PARENT}");
        assert_eq!(parse(&later).unwrap().unwrap().traceparent, PARENT);
        assert!(load_properties("a=\\u12").is_err());
        assert_eq!(
            load_properties("k=\\ud83d\\ude00 \\t").unwrap()[0].1,
            "\u{1f600} \t"
        );
    }

    #[test]
    fn text_without_a_traceparent_is_no_context() {
        for text in [
            "",
            "#only a comment\n",
            "tracestate=congo=t61rcWkgMzE",
            "   \n\t",
        ] {
            assert_eq!(parse(text), Ok(None), "{text:?}");
        }
    }

    #[test]
    fn malformed_traceparents_are_refused_with_the_reason() {
        for (value, why) in [
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "lowercase hex",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "trace-id is all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "parent-id is all zeros",
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version ff",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-00",
                "exactly four",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                "too short",
            ),
            (
                "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
                "dashes",
            ),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
                "followed by a dash",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902é-01",
                "lowercase hex",
            ),
        ] {
            let err = parse(&format!("traceparent={value}")).unwrap_err();
            assert!(err.contains(why), "{value}: {err}");
        }
        assert!(parse("traceparent=x").unwrap_err().contains("\"x\""));
        assert!(TraceContext::parse(b"traceparent=\xff").is_err());
    }

    #[test]
    fn a_higher_version_with_more_fields_passes_through_unchanged() {
        let value = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds";
        let context = parse(&format!("traceparent={value}")).unwrap().unwrap();
        assert_eq!(context.traceparent, value);
    }

    #[test]
    fn an_invalid_tracestate_is_dropped_but_the_traceparent_kept() {
        for state in [
            "Congo=x",
            "congo",
            "congo=a,b",
            "congo=tab\there",
            "congo=x=y",
            "-a=b",
        ] {
            let context = parse(&format!("traceparent={PARENT}\ntracestate={state}"))
                .unwrap()
                .unwrap();
            assert_eq!(context.traceparent, PARENT);
            assert_eq!(context.tracestate, None, "{state:?}");
        }
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(!valid_tracestate(&many));
        assert!(valid_tracestate("tenant@vendor=v, ,b=1"));
    }

    proptest::proptest! {
        #[test]
        fn any_stored_text_is_a_context_none_or_a_reason(
            text in proptest::prelude::prop_oneof![
                "(traceparent|tracestate|\\\\u|[#!= :\\\\\r\n]|00-|[0-9a-f]{1,32}|.){0,12}",
                proptest::prelude::any::<String>(),
            ]
        ) {
            let _ = TraceContext::parse(text.as_bytes());
        }
    }
}
