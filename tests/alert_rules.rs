//! The shipped Prometheus rules parse and fire as documented.

use std::process::Command;

#[test]
fn prometheus_alert_rules_pass_their_promtool_tests() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus");
    let out = Command::new("promtool")
        .args(["test", "rules", "alerts_test.yml"])
        .current_dir(dir)
        .output()
        .expect("promtool is missing: run scripts/install-deps.sh (Debian package prometheus)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn grafana_dashboard_is_valid_json_and_uses_walrelay_metrics() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/grafana/walrelay.json"
    ))
    .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = doc["panels"].as_array().unwrap();
    assert!(panels.len() >= 6);
    for metric in [
        "walrelay_slot_lag_bytes",
        "walrelay_events_published_total",
        "walrelay_delivery_latency_seconds_bucket",
        "walrelay_slot_lag_alert_level",
    ] {
        assert!(text.contains(metric), "dashboard does not show {metric}");
    }
}
