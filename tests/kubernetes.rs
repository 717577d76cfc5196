//! deploy/kubernetes/ stays in step with the rest of the repository. The
//! schema validation itself runs in scripts/validate-kubernetes.sh (called by
//! scripts/test.sh), which needs its validators installed.

use std::process::Command;

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Asserts that the file at `path` has every one of `needles` in it.
fn assert_has_all(path: &str, needles: &[&str]) -> String {
    let text = read(path);
    for needle in needles {
        assert!(text.contains(needle), "{path} lacks {needle:?}");
    }
    text
}

#[test]
fn prometheus_rule_is_regenerated_from_alerts_yml_without_a_difference() {
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/gen-prometheusrule.sh"
    ))
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        generated,
        read("deploy/kubernetes/prometheusrule.yaml"),
        "deploy/kubernetes/prometheusrule.yaml is stale: run \
         scripts/gen-prometheusrule.sh > deploy/kubernetes/prometheusrule.yaml"
    );
    // Every alert of the rules file is in the PrometheusRule.
    for line in read("deploy/prometheus/alerts.yml")
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
    {
        assert!(generated.contains(line.trim()), "{line}");
    }
}

#[test]
fn deployment_sets_what_the_binary_needs_in_a_pod() {
    let deployment = assert_has_all(
        "deploy/kubernetes/deployment.yaml",
        &[
            "replicas: 2",
            "type: Recreate",
            // The metrics default, 127.0.0.1:9187, cannot be probed from the kubelet.
            "name: WALRELAY_METRICS_ADDR\n              value: \"0.0.0.0:9187\"",
            "name: WALRELAY_STANDBY_POLL_INTERVAL",
            "key: WALRELAY_PG_URL",
            "key: WALRELAY_KAFKA_BROKERS",
            "path: /healthz",
            "path: /readyz",
            "readOnlyRootFilesystem: true",
            "runAsNonRoot: true",
            "allowPrivilegeEscalation: false",
            "containerPort: 9187",
        ],
    );
    // The image runs as this uid (Dockerfile: USER 10001).
    assert!(read("Dockerfile").contains("USER 10001"));
    assert!(deployment.contains("runAsUser: 10001"));
    // Every env var the manifest sets is a real flag's.
    let help = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for var in deployment
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- name: WALRELAY_"))
    {
        assert!(
            help.contains(&format!("[env: WALRELAY_{var}")),
            "WALRELAY_{var} is not an env var of walrelay run"
        );
    }
    // The Service is named walrelay: its name is the job label the alerts use.
    assert!(read("deploy/kubernetes/service.yaml").contains("  name: walrelay\n"));
    assert!(read("deploy/prometheus/alerts.yml").contains("up{job=\"walrelay\"}"));
}

#[test]
fn the_image_is_built_from_every_file_the_build_reads() {
    // No Docker engine runs here to build the image: a file the build
    // reads but the Dockerfile does not copy would fail only there, or (the
    // linker's order, librdkafka's CFLAGS) build an image that rests larger.
    assert_has_all(
        "Dockerfile",
        &[
            "Cargo.toml",
            "Cargo.lock",
            "build.rs",
            "COPY .cargo ./.cargo",
            "COPY link ./link",
            "COPY src ./src",
        ],
    );
}
