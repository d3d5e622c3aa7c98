//! The file budget: a Rust source file of the two crates and their tests holds one
//! responsibility in at most `BUDGET` lines, and a folder module is `name/mod.rs` (never
//! `name.rs` beside a `name/` folder). The files still over the budget are listed below with
//! the size they may not grow past; the list only shrinks: a listed file that fits the budget,
//! or is gone, must leave it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::repo;

/// The most lines a file holds.
const BUDGET: usize = 600;

/// The folders the budget covers (the fuzz crate, a workspace of its own, is not among them).
const ROOTS: [&str; 4] = [
    "harness/src",
    "harness/arctic",
    "harness/torch",
    "harness/tests",
];

/// Files over the budget, with the size they may not grow past.
const OVER: &[(&str, usize)] = &[];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                rs_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every covered file's line count, by its path from the repository root.
fn sizes(root: &Path) -> BTreeMap<String, usize> {
    let mut files = Vec::new();
    for r in ROOTS {
        rs_files(&root.join(r), &mut files);
    }
    files
        .into_iter()
        .map(|f| {
            let lines = std::fs::read_to_string(&f).unwrap().lines().count();
            let rel = f.strip_prefix(root).unwrap().display().to_string();
            (rel, lines)
        })
        .collect()
}

/// What breaks the budget, one line per file; and the `OVER` list as it should read now.
fn breaches(sizes: &BTreeMap<String, usize>, over: &[(&str, usize)]) -> (Vec<String>, String) {
    let allowed: BTreeMap<&str, usize> = over.iter().copied().collect();
    let mut bad = Vec::new();
    for (file, &n) in sizes {
        match allowed.get(file.as_str()) {
            Some(&cap) if n > cap => bad.push(format!("{file}: {n} lines, grown past {cap}")),
            Some(_) if n <= BUDGET => bad.push(format!(
                "{file}: {n} lines fits the budget now; take it off the list"
            )),
            None if n > BUDGET => bad.push(format!("{file}: {n} lines, over {BUDGET}")),
            _ => {}
        }
    }
    for file in allowed.keys().filter(|f| !sizes.contains_key(**f)) {
        bad.push(format!("{file}: listed but gone; take it off the list"));
    }
    let list: String = sizes
        .iter()
        .filter(|(_, &n)| n > BUDGET)
        .map(|(f, n)| format!("    (\"{f}\", {n}),\n"))
        .collect();
    (bad, list)
}

#[test]
fn every_file_fits_the_budget_or_is_a_listed_exception_that_does_not_grow() {
    let found = sizes(&repo());
    assert!(found.len() > 100, "the walk found the sources");
    let (bad, list) = breaches(&found, OVER);
    assert!(
        bad.is_empty(),
        "{}\n(the files over {BUDGET} lines now, for a list that only shrinks:\n{list})",
        bad.join("\n")
    );
}

#[test]
fn a_folder_module_is_mod_rs() {
    let mut files = Vec::new();
    for r in ROOTS {
        rs_files(&repo().join(r), &mut files);
    }
    let pairs: Vec<String> = files
        .iter()
        .filter(|f| f.with_extension("").is_dir() && !f.ends_with("main.rs"))
        .map(|f| f.strip_prefix(repo()).unwrap().display().to_string())
        .collect();
    assert!(
        pairs.is_empty(),
        "a file beside a folder of its name (make it name/mod.rs): {pairs:?}"
    );
}

#[test]
fn the_check_sees_growth_a_new_big_file_and_a_stale_exception() {
    let sizes: BTreeMap<String, usize> = [
        ("a.rs".to_string(), 700),
        ("b.rs".to_string(), 900),
        ("c.rs".to_string(), 100),
    ]
    .into();
    let (bad, list) = breaches(&sizes, &[("b.rs", 800), ("c.rs", 650), ("d.rs", 700)]);
    assert_eq!(
        bad,
        [
            "a.rs: 700 lines, over 600",
            "b.rs: 900 lines, grown past 800",
            "c.rs: 100 lines fits the budget now; take it off the list",
            "d.rs: listed but gone; take it off the list",
        ]
    );
    assert_eq!(list, "    (\"a.rs\", 700),\n    (\"b.rs\", 900),\n");
}
