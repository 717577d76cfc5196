//! The shipped Prometheus rules (deploy/prometheus/alerts.yml) judged on a
//! real walrelay's /metrics: `promtool test rules` on series built from
//! scraped values, so an alert is shown to fire (or stay quiet) on what
//! walrelay really serves, not on numbers a test made up.

use std::process::Command;
use std::time::Duration;

/// Two scrapes of one walrelay's /metrics, `apart` from each other.
#[derive(Clone, Copy)]
pub struct Scrapes<'a> {
    pub first: &'a str,
    pub second: &'a str,
    pub apart: Duration,
}

/// How long the scraped state is carried on: the rules' `for:` and
/// thresholds (300 s for WalrelayStalled, 15 min for
/// WalrelayRetentionStuck) lie within it.
const MINUTES: u32 = 20;

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

/// Whether the shipped rule `alert` fires within `MINUTES` for one walrelay
/// scraped twice, its series moving on as they moved between the scrapes
/// ([`firing`]).
pub fn fires(alert: &str, scrapes: &Scrapes) -> bool {
    firing(&[Target {
        instance: "walrelay",
        scrapes: Some(*scrapes),
    }])
    .contains(alert)
}

impl<'a> Scrapes<'a> {
    /// Two scrapes of one walrelay, in the order they were taken.
    pub fn between(first: &'a Scrape, second: &'a Scrape) -> Self {
        Scrapes {
            first: &first.body,
            second: &second.body,
            apart: second.at.duration_since(first.at),
        }
    }
}

/// One walrelay as Prometheus scraped it twice: `None` when its /metrics
/// did not answer (the process is gone), so that only `up` = 0 is left.
pub struct Target<'a> {
    pub instance: &'a str,
    pub scrapes: Option<Scrapes<'a>>,
}

/// Every series of one /metrics body: (name with its labels, value).
fn series(body: &str) -> Vec<(String, String, f64)> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match key.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}').to_string()),
                None => (key, String::new()),
            };
            value.is_finite().then(|| (name.to_string(), labels, value))
        })
        .collect()
}

/// Which of the shipped rules fire within `MINUTES` for these walrelays,
/// each series moving on as it moved between the two scrapes, as in
/// [`fires`], and `up` set as Prometheus sets it (1 for a target that
/// answered, 0 for one that did not). Every rule in alerts.yml is asked.
pub fn firing(targets: &[Target]) -> std::collections::BTreeSet<String> {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/alerts.yml");
    let text = std::fs::read_to_string(rules).unwrap();
    let alerts: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    let mut input = String::new();
    for target in targets {
        let base = format!("instance=\"{}\",job=\"walrelay\"", target.instance);
        let Some(scrapes) = &target.scrapes else {
            input.push_str(&format!(
                "      - series: 'up{{{base}}}'\n        values: '0+0x{MINUTES}'\n"
            ));
            continue;
        };
        input.push_str(&format!(
            "      - series: 'up{{{base}}}'\n        values: '1+0x{MINUTES}'\n"
        ));
        let first = series(scrapes.first);
        for (name, labels, second) in series(scrapes.second) {
            let before = first
                .iter()
                .find(|(n, l, _)| *n == name && *l == labels)
                .map_or(second, |s| s.2);
            let per_minute = (second - before) / scrapes.apart.as_secs_f64() * 60.0;
            let labels = if labels.is_empty() {
                base.clone()
            } else {
                format!("{labels},{base}")
            };
            input.push_str(&format!(
                "      - series: '{name}{{{labels}}}'\n        values: '{second}{per_minute:+}x{MINUTES}'\n"
            ));
        }
    }
    let mut test = format!(
        "rule_files:\n  - {rules}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    \
         input_series:\n{input}    alert_rule_test:\n"
    );
    for alert in &alerts {
        test.push_str(&format!(
            "      - eval_time: {MINUTES}m\n        alertname: {alert}\n        exp_alerts: []\n"
        ));
    }
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
    let fired: std::collections::BTreeSet<String> = said
        .lines()
        .filter_map(|l| l.trim().strip_prefix("alertname: "))
        .filter_map(|l| l.split(',').next())
        .map(str::to_string)
        .collect();
    assert!(
        out.status.success() || !fired.is_empty(),
        "promtool failed on\n{test}\n{said}"
    );
    fired
}

/// Scrapes one walrelay's /metrics twice, `apart`, as Prometheus would.
pub async fn scrape_twice(metrics_port: u16, apart: Duration) -> (String, String) {
    let first = super::http_get(metrics_port, "/metrics")
        .expect("walrelay's /metrics answers")
        .1;
    tokio::time::sleep(apart).await;
    let second = super::http_get(metrics_port, "/metrics")
        .expect("walrelay's /metrics answers")
        .1;
    (first, second)
}

/// The alerts that fire for one walrelay scraped twice, `apart`.
pub async fn firing_for(metrics_port: u16, apart: Duration) -> std::collections::BTreeSet<String> {
    let (first, second) = scrape_twice(metrics_port, apart).await;
    firing(&[Target {
        instance: "walrelay",
        scrapes: Some(Scrapes {
            first: &first,
            second: &second,
            apart,
        }),
    }])
}

/// One scrape of a walrelay's /metrics, and when it was taken.
pub struct Scrape {
    body: String,
    at: std::time::Instant,
}

pub fn scrape(metrics_port: u16) -> Scrape {
    Scrape {
        body: super::http_get(metrics_port, "/metrics")
            .expect("walrelay's /metrics answers")
            .1,
        at: std::time::Instant::now(),
    }
}

/// The alerts that fire for a walrelay scraped `earlier` and again now:
/// what changed between the two (a counter that rose) goes on changing.
pub fn firing_since(metrics_port: u16, earlier: &Scrape) -> std::collections::BTreeSet<String> {
    let now = scrape(metrics_port);
    firing(&[Target {
        instance: "walrelay",
        scrapes: Some(Scrapes::between(earlier, &now)),
    }])
}
