//! The shipped Prometheus rules (deploy/prometheus/alerts.yml) judged on a
//! real walrelay's /metrics: `promtool test rules` on series built from
//! scraped values, so an alert is shown to fire (or stay quiet) on what
//! walrelay really serves, not on numbers a test made up.

use std::process::Command;
use std::time::Duration;

/// Two scrapes of one walrelay's /metrics, `apart` from each other.
pub struct Scrapes<'a> {
    pub first: &'a str,
    pub second: &'a str,
    pub apart: Duration,
}

/// How long the scraped state is carried on: the rules' `for:` and
/// thresholds (300 s for WalrelayStalled) lie within it.
const MINUTES: u32 = 10;

/// The value of an unlabelled metric, or the sum of a labelled one.
pub fn value(body: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// Whether the shipped rule `alert` fires within `MINUTES` for a walrelay
/// whose `metrics` move on as they moved between the two scrapes: each
/// series starts at its second value and changes each minute by its
/// observed change per minute. A metric /metrics does not serve is left
/// out, as Prometheus would have no series for it.
pub fn fires(alert: &str, metrics: &[&str], scrapes: &Scrapes) -> bool {
    let mut series = String::new();
    for name in metrics {
        let (Some(first), Some(second)) = (value(scrapes.first, name), value(scrapes.second, name))
        else {
            continue;
        };
        let per_minute = (second - first) / scrapes.apart.as_secs_f64() * 60.0;
        series.push_str(&format!(
            "      - series: '{name}{{instance=\"walrelay\"}}'\n        values: '{second}{per_minute:+}x{MINUTES}'\n"
        ));
    }
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/alerts.yml");
    // Expecting nothing: promtool fails, listing what it got, if it fires.
    let test = format!(
        "rule_files:\n  - {rules}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    \
         input_series:\n{series}    alert_rule_test:\n      - eval_time: {MINUTES}m\n        \
         alertname: {alert}\n        exp_alerts: []\n"
    );
    let dir = super::TempDir::new("promtool");
    let file = dir.0.join("scraped_test.yml");
    std::fs::write(&file, &test).unwrap();
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .expect("promtool is missing: run scripts/install-deps.sh (Debian package prometheus)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let fired = format!("alertname=\"{alert}\"");
    match (out.status.success(), said.contains(&fired)) {
        (true, _) => false,
        (false, true) => true,
        (false, false) => panic!("promtool failed on\n{test}\n{said}"),
    }
}
