//! The table-less outbox: events written with
//! `pg_logical_emit_message(true, prefix, content)`, where content is a JSON
//! document `{"id", "aggregate_type", "aggregate_id", "event_type", "payload"}`.
//! The payload's JSON text is passed through byte for byte. An optional
//! string field named like the trace context column (`--field-tracing-span-context`,
//! `tracingspancontext` by default) holds the writer's trace context in the
//! column's format, e.g. `"traceparent=00-<trace-id>-<span-id>-01"`.

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::mapping::{MappingError, OutboxEvent};

/// A JSON value as header or key bytes: strings without quotes, null as None.
fn scalar(value: Option<&RawValue>) -> Option<Bytes> {
    let raw = value?.get();
    match serde_json::from_str::<serde_json::Value>(raw).ok()? {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(Bytes::from(s)),
        _ => Some(Bytes::copy_from_slice(raw.as_bytes())),
    }
}

/// The event in an emitted message; `route_by` names the field that picks
/// the topic, `trace_field` the one with the trace context (None: ignored).
pub fn event_from_message(
    content: &[u8],
    route_by: &str,
    trace_field: Option<&str>,
) -> Result<OutboxEvent, MappingError> {
    let fail = |reason: String| MappingError {
        event: Box::default(),
        reason,
    };
    let text = std::str::from_utf8(content)
        .map_err(|_| fail("the message content is not UTF-8 JSON".into()))?;
    // Fields stay raw JSON, so the payload's text passes through unchanged.
    let doc: HashMap<String, &RawValue> = serde_json::from_str(text).map_err(|e| {
        fail(format!(
            "the message content is not the walrelay event document \
             {{\"id\", \"aggregate_type\", \"aggregate_id\", \"event_type\", \"payload\"}}: {e}"
        ))
    })?;
    let field = |name: &str| doc.get(name).copied();
    let id = scalar(field("id"));
    let mut headers = vec![(Cow::Borrowed("id"), id.clone())];
    if let Some(event_type) = scalar(field("event_type")) {
        headers.push((Cow::Borrowed("event_type"), Some(event_type)));
    }
    let mut event = OutboxEvent {
        id,
        key: scalar(field("aggregate_id")),
        headers,
        route_value: scalar(field(route_by)),
        payload: field("payload")
            .map(|p| p.get())
            .filter(|p| *p != "null")
            .map(|p| Bytes::copy_from_slice(p.as_bytes())),
        ..OutboxEvent::default()
    };
    if event.id.is_none() {
        return Err(MappingError {
            event: Box::new(event),
            reason: "the message has no \"id\"".into(),
        });
    }
    if let Some(stored) = trace_field.and_then(|name| scalar(field(name))) {
        event.add_trace_context(&stored, crate::outbox::format::Format::String);
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_document_maps_to_key_headers_and_payload_text() {
        let content = br#"{"id": "e-1", "aggregate_type": "order", "aggregate_id": "o-1",
                           "event_type": "OrderPlaced", "payload": {"total":  10, "tags": ["a"]}}"#;
        let event = event_from_message(content, "event_type", None).unwrap();
        assert_eq!(event.id.as_deref(), Some(&b"e-1"[..]));
        assert_eq!(event.key.as_deref(), Some(&b"o-1"[..]));
        assert_eq!(event.route_value.as_deref(), Some(&b"OrderPlaced"[..]));
        assert_eq!(
            event.payload.as_deref(),
            Some(&br#"{"total":  10, "tags": ["a"]}"#[..])
        );
        let by_type = event_from_message(content, "aggregate_type", None).unwrap();
        assert_eq!(by_type.route_value.as_deref(), Some(&b"order"[..]));
    }

    #[test]
    fn a_document_without_id_or_not_json_is_refused() {
        assert!(event_from_message(br#"{"event_type": "X"}"#, "event_type", None).is_err());
        let err = event_from_message(b"hello", "event_type", None).unwrap_err();
        assert!(err.reason.contains("event document"), "{}", err.reason);
    }

    #[test]
    fn a_trace_context_field_becomes_the_trace_headers() {
        let content = br#"{"id": "e-1", "event_type": "T", "payload": {},
            "tracingspancontext": "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\ntracestate=congo\\=t61rcWkgMzE"}"#;
        let event = event_from_message(content, "event_type", Some("tracingspancontext")).unwrap();
        let names: Vec<&str> = event.headers.iter().map(|(n, _)| n.as_ref()).collect();
        assert_eq!(names, ["traceparent", "tracestate", "id", "event_type"]);
        assert_eq!(
            event.header("traceparent"),
            Some(&b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"[..])
        );
        assert_eq!(event.header("tracestate"), Some(&b"congo=t61rcWkgMzE"[..]));
        // Turned off, or malformed: the event is the same, without trace headers.
        let off = event_from_message(content, "event_type", None).unwrap();
        assert_eq!(off.header("traceparent"), None);
        let bad = br#"{"id": "e-2", "event_type": "T", "tracingspancontext": "traceparent=nope"}"#;
        let event = event_from_message(bad, "event_type", Some("tracingspancontext")).unwrap();
        assert_eq!(event.header("traceparent"), None);
        assert_eq!(event.id.as_deref(), Some(&b"e-2"[..]));
    }
}
