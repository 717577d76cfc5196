//! The command line: docs/configuration.md stays in step with --help, and
//! migrate-from-debezium works on realistic connector files.

use std::collections::BTreeMap;
use std::process::Command;

fn walrelay(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(args)
        .env_remove("WALRELAY_PG_URL")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// flag -> (env var, default) from `walrelay run --help`.
fn flags_from_help() -> BTreeMap<String, (String, Option<String>)> {
    flags_of("run")
}

/// flag -> (env var, default) from `walrelay SUBCOMMAND --help`.
fn flags_of(subcommand: &str) -> BTreeMap<String, (String, Option<String>)> {
    let (_, help) = walrelay(&[subcommand, "--help"]);
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in help.lines() {
        let trimmed = line.trim_start();
        if (trimmed.starts_with("--") || trimmed.starts_with("-X, --")) && line.starts_with("  ") {
            let name = trimmed
                .trim_start_matches("-X, ")
                .split([' ', '='])
                .next()
                .unwrap();
            current = (name != "--help").then(|| name.to_string());
            if let Some(name) = &current {
                flags.insert(name.clone(), (String::new(), None));
            }
        } else if let Some(name) = &current {
            let entry = flags.get_mut(name).unwrap();
            if let Some(env) = trimmed.strip_prefix("[env: ") {
                entry.0 = env.trim_end_matches(']').trim_end_matches('=').to_string();
            }
            if let Some(default) = trimmed.strip_prefix("[default: ") {
                entry.1 = Some(default.trim_end_matches(']').to_string());
            }
        }
    }
    flags
}

/// The lines of docs/configuration.md from the heading that names
/// `walrelay SUBCOMMAND` to the next section of its level.
fn section<'a>(doc: &'a str, subcommand: &str) -> Vec<&'a str> {
    let heading = format!("## `walrelay {subcommand}`");
    doc.lines()
        .skip_while(|l| !l.starts_with(&heading))
        .enumerate()
        .take_while(|(i, l)| *i == 0 || !l.starts_with("## "))
        .map(|(_, l)| l)
        .collect()
}

/// Every flag in `help` has a row in `rows` with its env var and default.
fn assert_documented(rows: &[&str], help: &BTreeMap<String, (String, Option<String>)>) {
    for (flag, (env, default)) in help {
        let row = rows
            .iter()
            .find(|l| l.starts_with('|') && l.contains(&format!("`{flag}`")))
            .unwrap_or_else(|| panic!("docs/configuration.md has no row for {flag}"));
        assert!(
            row.contains(&format!("`{env}`")),
            "{flag}: env {env} missing in {row}"
        );
        match default {
            Some(d) => assert!(
                row.contains(&format!("`{d}`")),
                "{flag}: default {d} missing in {row}"
            ),
            None => assert!(row.contains("required") || row.contains('—'), "{row}"),
        }
    }
}

#[test]
fn configuration_doc_lists_every_flag_with_its_env_var_and_default() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let run = flags_from_help();
    assert!(run.len() > 30, "parsed {run:?}");
    let lines: Vec<&str> = doc.lines().collect();
    assert_documented(&lines, &run);
    let mut documented = run.clone();
    // The commands that take every flag of run document their own flags
    // in their own section.
    // A command with flags of its own only documents them in its section.
    for subcommand in ["redrive"] {
        let own = flags_of(subcommand);
        assert!(own.len() > 8, "parsed {own:?}");
        let every: Vec<&str> = doc
            .lines()
            .skip_while(|l| !l.starts_with("## Flags of every subcommand"))
            .enumerate()
            .take_while(|(i, l)| *i == 0 || !l.starts_with("## "))
            .map(|(_, l)| l)
            .collect();
        let mut rows = section(&doc, subcommand);
        assert_documented(&[rows.clone(), every].concat(), &own);
        rows.retain(|l| l.starts_with("| `-"));
        for line in rows.iter().filter(|l| l.starts_with("| `-")) {
            let flag = line.split('`').find(|s| s.starts_with("--")).unwrap();
            assert!(
                own.contains_key(flag),
                "docs/configuration.md documents {subcommand} {flag}, which --help lacks"
            );
        }
        documented.extend(own);
    }
    for subcommand in ["replay", "audit"] {
        let mut own = flags_of(subcommand);
        assert!(
            run.keys().all(|f| own.contains_key(f)),
            "{subcommand} lacks run's flags"
        );
        own.retain(|flag, _| !run.contains_key(flag));
        assert!(!own.is_empty(), "{subcommand} has no flags of its own");
        assert_documented(&section(&doc, subcommand), &own);
        documented.extend(own);
    }
    for line in doc.lines().filter(|l| l.starts_with("| `-")) {
        let flag = line.split('`').find(|s| s.starts_with("--")).unwrap();
        assert!(
            documented.contains_key(flag),
            "docs/configuration.md documents {flag}, which --help lacks"
        );
    }
}

#[test]
fn migrate_from_debezium_prints_a_runnable_command_and_notes() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/debezium");
    for file in ["outbox-connector.json", "outbox-connector.properties"] {
        let (ok, out) = walrelay(&["migrate-from-debezium", &format!("{dir}/{file}")]);
        assert!(ok, "{file}: {out}");
        assert!(out.starts_with("walrelay run \\\n  --pg-url "), "{out}");
        assert!(out.contains("\nNotes:\n- "), "{out}");
        assert!(!out.contains("s3cr3t"), "{out}");
        // Every flag it prints is one walrelay run knows.
        let known = flags_from_help();
        for flag in out
            .lines()
            .filter_map(|l| l.trim().split(' ').next())
            .filter(|w| w.starts_with("--"))
        {
            assert!(known.contains_key(flag), "{file}: unknown flag {flag}");
        }
    }
}

#[test]
fn a_bad_value_from_the_environment_names_its_variable_and_a_typed_one_does_not() {
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
            .args([
                "run",
                "--pg-url",
                "postgres://u@h/db",
                "--kafka-brokers",
                "k:9092",
            ])
            .args(extra)
            .env("WALRELAY_TOPIC_PARTITIONS", "many")
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let from_env = run(&[]);
    assert!(
        from_env.contains("--topic-partitions")
            && from_env.contains("environment variable WALRELAY_TOPIC_PARTITIONS"),
        "{from_env}"
    );
    let typed = run(&["--topic-partitions", "few"]);
    assert!(typed.contains("'few'"), "{typed}");
    assert!(!typed.contains("environment variable"), "{typed}");
}

/// clap reads a flag's variable only when the flag is not typed: one `-X`
/// used to drop all of WALRELAY_KAFKA_PROPERTIES without a word.
#[test]
fn kafka_properties_from_the_environment_apply_beneath_typed_ones() {
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args([
            "check",
            "--pg-url",
            "postgres://u@127.0.0.1:1/x",
            "--kafka-brokers",
            "127.0.0.1:1",
            "-X",
            "linger.ms=5",
        ])
        .env("WALRELAY_KAFKA_PROPERTIES", "no.such.property=1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("librdkafka refused -X no.such.property"),
        "{stdout}"
    );
}
