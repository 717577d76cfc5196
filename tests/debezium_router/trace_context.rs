//! `tracing.span.context.field` (default `tracingspancontext`), from
//! debezium/debezium debezium-connect-plugins/.../transforms/tracing/
//! (ActivateTracingSpan.apply, TracingSpanUtil.traceRecord, PropertiesGetter)
//! and documentation/modules/ROOT/pages/integrations/tracing.adoc: the column
//! holds a serialized java.util.Properties with the writer's W3C context
//! (`traceparent=...`, as the Quarkus outbox extension's `Properties.store`
//! writes it, date comment first); OpenTelemetry's W3C propagator extracts it
//! and injects `traceparent` (and `tracestate` when not empty) into the
//! record's headers, next to `id`. ActivateTracingSpanTest asserts the
//! header holds the writer's trace id. Debezium's span id there is that of
//! its own `db-log-write` child span; walrelay creates no spans and passes
//! the writer's traceparent through unchanged (docs/configuration.md), so
//! the expected traceparent is the writer's, with the same trace id.
//! The value is the payload alone: the column is not copied into it
//! (EventRouterDelegate.apply builds the value from the payload and placed
//! fields only). A NULL column gives no trace headers: the router sets
//! tracing.with.context.field.only=true unless configured
//! (EventRouterDelegate.configure), and ActivateTracingSpan.apply then
//! returns the record untouched.

use crate::{check, relay_rows_and_log, Expected};

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writers_trace_context_becomes_traceparent_and_tracestate_headers() {
    let (got, log) = relay_rows_and_log(
        &[],
        "ALTER TABLE outbox ADD COLUMN tracingspancontext varchar(256);
         INSERT INTO outbox (id, aggregatetype, aggregateid, payload, tracingspancontext) VALUES
           ('00000000-0000-0000-0000-0000000000e1', 'order', 'o-1', '{}',
            E'#Mon Nov 30 13:50:37 UTC 2026\\ntraceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\\n'),
           ('00000000-0000-0000-0000-0000000000e2', 'order', 'o-2', '{}',
            E'traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\\ntracestate=congo\\\\=t61rcWkgMzE\\n'),
           ('00000000-0000-0000-0000-0000000000e3', 'order', 'o-3', '{}', NULL),
           ('00000000-0000-0000-0000-0000000000e4', 'order', 'o-4', '{}', 'traceparent=00-not-a-context');",
        &["outbox.event.order"],
        4,
    )
    .await;
    let expected = |id, key, headers| Expected {
        id,
        topic: "outbox.event.order",
        key: Some(key),
        headers,
        value: Some("{}"),
        partition: None,
        timestamp: None,
    };
    check(
        &got,
        &[
            expected(
                "00000000-0000-0000-0000-0000000000e1",
                "o-1",
                &[("traceparent", PARENT)],
            ),
            // Properties.store escapes '=' in values; the header is unescaped.
            expected(
                "00000000-0000-0000-0000-0000000000e2",
                "o-2",
                &[("traceparent", PARENT), ("tracestate", "congo=t61rcWkgMzE")],
            ),
            expected("00000000-0000-0000-0000-0000000000e3", "o-3", &[]),
            // Malformed: published all the same, without trace headers, and logged.
            expected("00000000-0000-0000-0000-0000000000e4", "o-4", &[]),
        ],
    );
    assert!(
        log.lines().any(|l| l.contains("without trace headers")
            && l.contains("00000000-0000-0000-0000-0000000000e4")),
        "{log}"
    );
}
