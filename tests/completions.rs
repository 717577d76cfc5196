//! `walrelay completions <shell>` and `walrelay man` come from the clap
//! definitions: bash accepts the script, and groff renders the pages.

use std::io::Write;
use std::process::{Command, Stdio};

fn walrelay(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run_with_stdin(program: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bash_completion_registers_and_completes_run_flags() {
    let (ok, script, err) = walrelay(&["completions", "bash"]);
    assert!(ok, "{err}");
    // Load the script into bash, then ask it to complete `walrelay run --pg`.
    let probe = format!(
        "{script}\ncomplete -p walrelay\n\
         COMP_WORDS=(walrelay run --pg); COMP_CWORD=2; COMP_LINE='walrelay run --pg'; \
         COMP_POINT=${{#COMP_LINE}}; _walrelay walrelay --pg run; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    );
    let (ok, out, err) = run_with_stdin("bash", &["-s"], &probe);
    assert!(ok, "bash rejected the script: {err}");
    assert!(out.contains("-F _walrelay walrelay"), "{out}");
    assert!(out.lines().any(|l| l == "--pg-url"), "{out}");
}

#[test]
fn every_shell_gets_a_script_naming_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (ok, script, err) = walrelay(&["completions", shell]);
        assert!(ok, "{shell}: {err}");
        for word in ["run", "check", "status", "log-format"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
    let (ok, _, err) = walrelay(&["completions", "tcsh"]);
    assert!(!ok);
    assert!(err.contains("bash") && err.contains("zsh"), "{err}");
}

#[test]
fn man_pages_render_with_groff_for_walrelay_and_each_subcommand() {
    let (ok, page, err) = walrelay(&["man"]);
    assert!(ok, "{err}");
    assert!(
        page.starts_with(".ie") || page.contains(".TH walrelay 1"),
        "{page}"
    );
    let (ok, text, err) = run_with_stdin("groff", &["-man", "-Tutf8", "-ww"], &page);
    assert!(ok && err.trim().is_empty(), "groff: {err}");
    assert!(text.contains("completions"), "{text}");

    let (ok, page, err) = walrelay(&["man", "run"]);
    assert!(ok, "{err}");
    assert!(page.contains(".TH walrelay-run 1"), "{page}");
    let (ok, text, err) = run_with_stdin("groff", &["-man", "-Tutf8", "-ww"], &page);
    assert!(ok && err.trim().is_empty(), "groff: {err}");
    for flag in ["--pg-url", "--kafka-brokers", "WALRELAY_PG_URL"] {
        let plain = plain_text(&text);
        assert!(
            plain.contains(flag),
            "walrelay-run(1) lacks {flag}:\n{plain}"
        );
    }

    let (ok, _, err) = walrelay(&["man", "nope"]);
    assert!(!ok);
    assert!(err.contains("run") && err.contains("status"), "{err}");
}

/// groff's terminal output without overstriking (c\bc for bold) and with
/// ASCII hyphens for the Unicode ones it may typeset.
fn plain_text(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '\u{8}' => {
                out.pop();
            }
            '\u{2010}' | '\u{2212}' => out.push('-'),
            c => out.push(c),
        }
    }
    out
}
