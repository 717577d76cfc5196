//! Prometheus metrics and the small HTTP endpoint that serves them, with
//! `/healthz` (the process is alive) and `/readyz` (it is streaming).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};
use rdkafka::error::KafkaError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{debug, info};

use crate::error::{Error, Result};
use crate::kafka::error_reason;
use crate::kafka::producer::unix_now_us;

#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

struct Inner {
    registry: Registry,
    ready: AtomicBool,
    events_published: IntCounterVec,
    delivery_latency: Histogram,
    confirmed_flush_lsn: IntGauge,
    inflight_events: IntGauge,
    inflight_bytes: IntGauge,
    publish_errors: IntCounterVec,
    reconnects: IntCounterVec,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let events_published = IntCounterVec::new(
            Opts::new(
                "walrelay_events_published_total",
                "Events Kafka acknowledged, by topic.",
            ),
            &["topic"],
        )
        .expect("valid metric");
        let delivery_latency = Histogram::with_opts(
            HistogramOpts::new(
                "walrelay_delivery_latency_seconds",
                "Time from the Postgres commit to Kafka's acknowledgement.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0,
            ]),
        )
        .expect("valid metric");
        let confirmed_flush_lsn = IntGauge::new(
            "walrelay_confirmed_flush_lsn",
            "The LSN walrelay last confirmed to Postgres, as a number.",
        )
        .expect("valid metric");
        let inflight_events = IntGauge::new(
            "walrelay_inflight_events",
            "Events produced but not yet acknowledged by Kafka.",
        )
        .expect("valid metric");
        let inflight_bytes = IntGauge::new(
            "walrelay_inflight_bytes",
            "Key and value bytes produced but not yet acknowledged by Kafka.",
        )
        .expect("valid metric");
        let publish_errors = IntCounterVec::new(
            Opts::new(
                "walrelay_publish_errors_total",
                "Kafka delivery errors, by kind.",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let reconnects = IntCounterVec::new(
            Opts::new(
                "walrelay_reconnects_total",
                "Reconnects after a failure, by target (postgres, kafka).",
            ),
            &["target"],
        )
        .expect("valid metric");
        for collector in [
            Box::new(events_published.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(delivery_latency.clone()),
            Box::new(confirmed_flush_lsn.clone()),
            Box::new(inflight_events.clone()),
            Box::new(inflight_bytes.clone()),
            Box::new(publish_errors.clone()),
            Box::new(reconnects.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric registered once");
        }
        for target in ["postgres", "kafka"] {
            reconnects.with_label_values(&[target]);
        }
        Metrics(Arc::new(Inner {
            registry,
            ready: AtomicBool::new(false),
            events_published,
            delivery_latency,
            confirmed_flush_lsn,
            inflight_events,
            inflight_bytes,
            publish_errors,
            reconnects,
        }))
    }

    pub fn record_delivery(&self, topic: &str, commit_time_us: i64) {
        self.0.events_published.with_label_values(&[topic]).inc();
        let latency_us = (unix_now_us() - commit_time_us).max(0);
        self.0.delivery_latency.observe(latency_us as f64 / 1e6);
    }

    pub fn record_publish_error(&self, error: &KafkaError) {
        self.0
            .publish_errors
            .with_label_values(&[&error_reason(error)])
            .inc();
    }

    pub fn record_reconnect(&self, target: &str) {
        self.0.reconnects.with_label_values(&[target]).inc();
    }

    pub fn set_confirmed(&self, lsn: u64) {
        self.0.confirmed_flush_lsn.set(lsn as i64);
    }

    pub fn set_inflight(&self, events: usize, bytes: usize) {
        self.0.inflight_events.set(events as i64);
        self.0.inflight_bytes.set(bytes as i64);
    }

    pub fn set_ready(&self, ready: bool) {
        self.0.ready.store(ready, Ordering::Relaxed);
    }

    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.0.registry.gather(), &mut out)
            .expect("text encoding cannot fail");
        String::from_utf8(out).expect("metrics are UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Binds the endpoint now (so a taken port fails start-up) and serves it in the background.
pub async fn serve(addr: SocketAddr, metrics: Metrics) -> Result<()> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        Error::permanent(format!(
            "cannot listen on --metrics-addr {addr}; choose a free address"
        ))
        .with_source(e)
    })?;
    info!(%addr, "serving /metrics, /healthz and /readyz");
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let n = match stream.read(&mut request).await {
                    Ok(n) => n,
                    Err(e) => return debug!(error = %e, "metrics request failed"),
                };
                let (status, content_type, body) = respond(&request[..n], &metrics);
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(())
}

fn respond(request: &[u8], metrics: &Metrics) -> (&'static str, &'static str, String) {
    let line = request
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return ("405 Method Not Allowed", "text/plain", "GET only\n".into());
    }
    match path.split('?').next().unwrap_or("") {
        "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
        "/healthz" => ("200 OK", "text/plain", "ok\n".into()),
        "/readyz" if metrics.0.ready.load(Ordering::Relaxed) => {
            ("200 OK", "text/plain", "ready\n".into())
        }
        "/readyz" => (
            "503 Service Unavailable",
            "text/plain",
            "not streaming\n".into(),
        ),
        _ => (
            "404 Not Found",
            "text/plain",
            "try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}
