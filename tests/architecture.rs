//! The module layout is the architecture: these tests keep it free of import
//! cycles, so each concern can be read (and changed) on its own. The build
//! is one build: the tests and examples link the library `cargo build` makes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use regex::Regex;

/// Module path (`relay::apply`) of every source file, with the modules it names.
fn module_uses() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let module_of = |path: &Path| -> Option<String> {
        let relative = path.strip_prefix(&root).unwrap().with_extension("");
        let mut parts: Vec<String> = relative
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        match parts.last().map(String::as_str) {
            Some("main") if parts.len() == 1 => return None,
            Some("lib") if parts.len() == 1 => parts.clear(),
            Some("mod") => {
                parts.pop();
            }
            _ => {}
        }
        Some(parts.join("::"))
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    // The longest module that is a prefix of the path.
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len())
            .rev()
            .map(|n| parts[..n].join("::"))
            .find(|candidate| modules.contains(candidate))
    };
    let path_re = Regex::new(r"\b(crate|super)((?:::\w+)+)").unwrap();
    // `use crate::a::{b, c::d}` names a::b and a::c::d.
    let group_re = Regex::new(r"\b(crate|super)((?:::\w+)*)::\{([^{}]*)\}").unwrap();
    let mut uses = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        // Unit tests may reach anywhere; only the code itself must not cycle.
        let code = text.split("#[cfg(test)]\nmod tests {").next().unwrap();
        let mut paths: Vec<(String, String)> = Vec::new();
        for group in group_re.captures_iter(code) {
            for item in group[3].split(',').map(str::trim).filter(|i| !i.is_empty()) {
                let item = item.split(" as ").next().unwrap().trim_end_matches("::*");
                let item = if item == "self" { "" } else { item };
                let tail = format!("{}::{item}", &group[2]);
                paths.push((
                    group[1].to_string(),
                    tail.trim_end_matches("::").to_string(),
                ));
            }
        }
        for found in path_re.captures_iter(code) {
            paths.push((found[1].to_string(), found[2].to_string()));
        }
        let mut named = BTreeSet::new();
        for (anchor, tail) in paths {
            let Some(tail) = tail.strip_prefix("::") else {
                continue;
            };
            let absolute = if anchor == "crate" {
                tail.to_string()
            } else {
                let is_mod_file = file.file_name().is_some_and(|n| n == "mod.rs");
                let mut base: Vec<&str> = module.split("::").filter(|p| !p.is_empty()).collect();
                if !is_mod_file {
                    base.pop();
                }
                let mut parts = base;
                parts.extend(tail.split("::"));
                parts.join("::")
            };
            if let Some(target) = resolve(&absolute) {
                // A module may use its parents: they declare it.
                let is_ancestor = module == target || module.starts_with(&format!("{target}::"));
                if !is_ancestor && !target.is_empty() {
                    named.insert(target);
                }
            }
        }
        uses.insert(module, named);
    }
    uses
}

#[test]
fn no_two_modules_import_each_other_directly_or_through_others() {
    let uses = module_uses();
    let mut cycles = Vec::new();
    for start in uses.keys() {
        // Depth-first search for a path back to `start`.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((module, path)) = stack.pop() {
            for next in uses.get(&module).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(start.clone());
                    cycles.push(cycle.join(" -> "));
                } else if seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles between modules:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_cycle_check_sees_uses_of_crate_and_super_paths() {
    let uses = module_uses();
    assert!(
        uses["relay"].contains("postgres::replication"),
        "{:?}",
        uses["relay"]
    );
    assert!(
        uses["delivery::progress"].contains("delivery::checkpoint"),
        "{:?}",
        uses["delivery::progress"]
    );
    assert!(
        uses["delivery::poison"].contains("delivery::progress"),
        "{:?}",
        uses["delivery::poison"]
    );
}

/// The top-level modules by floor, lowest first. A module imports only
/// modules on floors below its own, so none of them (and no pair through a
/// third) imports one that imports it back: `delivery` serves `relay` and
/// `lifecycle` from below, and `kafka` reads no `config`. A new module
/// takes the floor above the highest one it imports.
const FLOORS: &[&[&str]] = &[
    &[
        "allocator",
        "clock",
        "error",
        "logging",
        "output",
        "percent",
    ],
    &["aws", "http", "metrics", "migrate"],
    &["postgres"],
    &["sink", "retention", "watchdog"],
    &["kafka", "outbox"],
    &["registry"],
    &["config"],
    &["delivery", "status", "completions"],
    &["lifecycle", "redrive"],
    &["relay"],
    &["check"],
];

/// Each top-level module and the other top-level modules it imports.
fn top_level_uses() -> BTreeMap<String, BTreeSet<String>> {
    let top = |module: &str| module.split("::").next().unwrap_or("").to_string();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, named) in module_uses() {
        let from = top(&module);
        if from.is_empty() {
            continue;
        }
        let entry = uses.entry(from.clone()).or_default();
        entry.extend(named.iter().map(|n| top(n)).filter(|n| *n != from));
    }
    uses
}

#[test]
fn every_top_level_module_imports_only_modules_on_the_floors_below_it() {
    let floor_of = |module: &str| FLOORS.iter().position(|floor| floor.contains(&module));
    let mut wrong = Vec::new();
    for (module, named) in top_level_uses() {
        let Some(floor) = floor_of(&module) else {
            wrong.push(format!("{module} is on no floor: add it to FLOORS"));
            continue;
        };
        for target in named {
            match floor_of(&target) {
                Some(below) if below < floor => {}
                _ => wrong.push(format!("{module} (floor {floor}) imports {target}")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up or across the floors:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_floor_check_sees_a_module_import_one_of_another_top_level_module() {
    let uses = top_level_uses();
    assert!(uses["relay"].contains("delivery"), "{:?}", uses["relay"]);
    assert!(
        uses["lifecycle"].contains("delivery"),
        "{:?}",
        uses["lifecycle"]
    );
    assert!(
        !uses["delivery"].contains("relay"),
        "{:?}",
        uses["delivery"]
    );
}

/// Each crate `cargo tree` lists, with the features it is built with.
fn features(edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "--offline", "--prefix", "none", "-e", edges])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut crates: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim_end_matches(" (*)");
        match line.split_once(" feature ") {
            Some((name, feature)) => {
                crates
                    .entry(name.to_string())
                    .or_default()
                    .insert(feature.to_string());
            }
            None => {
                let name = line.split(' ').next().unwrap_or(line);
                crates.entry(name.to_string()).or_default();
            }
        }
    }
    crates
}

/// The examples and integration tests link the library built with the
/// dev-dependencies' features too: a feature only they turn on (proptest's
/// `regex-syntax/default` once did) makes `cargo build --example dedupe_consumer`
/// rebuild walrelay and half its dependencies after `cargo build`.
#[test]
fn dev_dependencies_turn_on_no_feature_of_a_crate_walrelay_builds_with() {
    let build = features("normal,features");
    let with_dev = features("normal,dev,features");
    let differ: Vec<String> = build
        .iter()
        .filter(|(name, features)| with_dev.get(*name) != Some(features))
        .map(|(name, features)| format!("{name}: {features:?} vs {:?}", with_dev.get(name)))
        .collect();
    assert!(
        differ.is_empty(),
        "give Cargo.toml's [dependencies] these features, so that examples and tests do not \
         rebuild the crate:\n{}",
        differ.join("\n")
    );
}
