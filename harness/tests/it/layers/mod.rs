//! The import direction of the three crates' sources, checked from their files:
//! - at the top of `harness/src`, every module sits in a layer of `docs/architecture.md`'s
//!   "Layers" table (read from the doc, so the doc and the check are one table), and uses only
//!   its own layer and those below; the modules the harness re-exports from the Arctic crate
//!   (`pub use rlharness_arctic::{..}` in `lib.rs`) count as modules of the lowest layer;
//! - at the top of `harness/arctic/src`, the same against the "Arctic layers" table;
//! - inside every folder module of the three crates, siblings never use each other in a ring,
//!   of any length (`graph.rs` says what counts as a use);
//! - the torch engine (`harness/torch`: library, executable, tests and examples) uses the
//!   Arctic crate only, never the harness (`rlharness`), and its manifest depends on no other
//!   crate of the workspace; cargo itself rejects a cycle between the crates.

mod graph;
mod paths;
mod source;

use std::collections::BTreeSet;

use crate::common::repo;
use graph::{Edge, Graph};

/// The table of the section `title` of `docs/architecture.md` ("Layers", "Arctic layers"),
/// lowest first: each row's module names.
fn layers_of_doc(doc: &str, title: &str) -> Vec<Vec<String>> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with(title))
        .unwrap_or_else(|| panic!("docs/architecture.md has a section {title}"));
    section
        .lines()
        .filter(|l| l.starts_with("| ") && l.as_bytes().get(2).is_some_and(u8::is_ascii_digit))
        .map(|row| {
            let cell = row.split('|').nth(2).unwrap_or_default();
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        })
        .collect()
}

fn doc_layers() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let layers = layers_of_doc(&doc, "Layers");
    assert!(layers.len() > 5, "the table was read: {layers:?}");
    layers
}

fn arctic_layers() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let layers = layers_of_doc(&doc, "Arctic layers");
    assert!(layers.len() > 3, "the table was read: {layers:?}");
    layers
}

/// The modules `harness/src/lib.rs` re-exports from the Arctic crate: `pub use
/// rlharness_arctic::{a, b};` or `pub use rlharness_arctic::a;` (none: the harness uses that
/// crate by its own name).
fn reexported_from_arctic() -> BTreeSet<String> {
    let lib = std::fs::read_to_string(repo().join("harness/src/lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub use "))
        .flat_map(|l| paths::paths(l, &["rlharness_arctic"]))
        .filter(|p| p.len() == 2)
        .map(|p| p[1].clone())
        .collect()
}

/// The top-level modules of the crate under `src` (relative to the repository).
fn top_modules(src: &str) -> BTreeSet<String> {
    graph::read(&repo().join(src), &[])
        .modules
        .iter()
        .filter(|m| m.len() == 1)
        .map(|m| m[0].clone())
        .collect()
}

/// What a table gets wrong against a crate's top-level modules `top`: modules it leaves out,
/// names that are no module, names given twice (empty when right).
fn table_against(layers: &[Vec<String>], top: &BTreeSet<String>) -> String {
    let named: Vec<&String> = layers.iter().flatten().collect();
    let roots = ["lib", "main"];
    let missing: Vec<&String> = top.iter().filter(|m| !named.contains(m)).collect();
    let stale: Vec<&&String> = named
        .iter()
        .filter(|m| !top.contains(**m) && !roots.contains(&m.as_str()))
        .collect();
    let twice: BTreeSet<&&String> = named
        .iter()
        .filter(|m| named.iter().filter(|n| n == m).count() > 1)
        .collect();
    if missing.is_empty() && stale.is_empty() && twice.is_empty() {
        return String::new();
    }
    format!("missing {missing:?}, naming no module {stale:?}, named twice {twice:?}")
}

fn layer_of(layers: &[Vec<String>], module: &str) -> Option<usize> {
    layers.iter().position(|l| l.iter().any(|m| m == module))
}

/// What breaks the layering at the crate's top, one line per edge.
fn violations(layers: &[Vec<String>], graph: &Graph) -> Vec<String> {
    let mut bad = Vec::new();
    for (Edge { folder, from, to }, file) in graph.edges.iter().chain(&graph.test_edges) {
        if !folder.is_empty() {
            continue;
        }
        match (layer_of(layers, from), layer_of(layers, to)) {
            (None, _) => bad.push(format!("{file}: module `{from}` has no layer")),
            (_, None) => bad.push(format!("{file}: uses `{to}`, which has no layer")),
            (Some(a), Some(b)) if b > a => bad.push(format!(
                "{file}: `{from}` (layer {a}) uses `{to}` (layer {b}), above it"
            )),
            _ => {}
        }
    }
    bad
}

#[test]
fn no_module_uses_one_above_it() {
    let graph = graph::read(&repo().join("harness/src"), &[]);
    assert!(graph.edges.len() > 40, "the walk found the tree");
    let bad = violations(&doc_layers(), &graph);
    assert!(bad.is_empty(), "upward imports:\n{}", bad.join("\n"));
}

#[test]
fn the_docs_table_names_every_top_level_module_once() {
    let layers = doc_layers();
    let wrong = table_against(&layers, &top_modules("harness/src"));
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's Layers table against harness/src: {wrong}"
    );
    // The Arctic crate is used by its own name: no module of it is a second path of the harness.
    let reexported = reexported_from_arctic();
    assert!(
        reexported.is_empty(),
        "harness/src/lib.rs re-exports Arctic modules: {reexported:?}"
    );
    let probe = paths::paths("rlharness_arctic::{fsx, wire};", &["rlharness_arctic"]);
    assert_eq!(probe.len(), 2, "the probe reads a re-export: {probe:?}");
}

#[test]
fn the_arctic_crate_uses_no_module_above_it_and_its_table_is_whole() {
    let layers = arctic_layers();
    let wrong = table_against(&layers, &top_modules("harness/arctic/src"));
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's Arctic layers table against harness/arctic/src: {wrong}"
    );
    let graph = graph::read(&repo().join("harness/arctic/src"), &["rlharness"]);
    assert!(graph.edges.len() > 10, "the walk found the tree");
    let bad = violations(&layers, &graph);
    assert!(bad.is_empty(), "upward imports:\n{}", bad.join("\n"));
    assert!(graph.external.is_empty(), "{:?}", graph.external);
}

#[test]
fn no_siblings_use_each_other_in_a_ring() {
    for src in ["harness/src", "harness/arctic/src", "harness/torch/src"] {
        let graph = graph::read(&repo().join(src), &[]);
        assert!(
            graph.undeclared.is_empty(),
            "{src}: files no `mod` reaches: {:?}",
            graph.undeclared
        );
        let rings = graph.cycles();
        assert!(rings.is_empty(), "{src}:\n{}", rings.join("\n"));
    }
}

fn rs_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether `ident` names one of the judge's deciding or naming functions: what decides a
/// verdict's headline (`Judged`, `decide`), a judge of a run (`judge_run`, `judge_combined`),
/// a maker of a rule's id (`rule_id`, `seeds_rule_id`, ...).
fn names_the_judge(ident: &str) -> bool {
    matches!(ident, "Judged" | "decide" | "judge_run" | "judge_combined")
        || ident.ends_with("rule_id")
}

/// The judge's names the code that ships under the folder `under` of the crate at `src` uses,
/// one line per file (test modules left out: a fixture may call the judge to make its data).
fn judge_names_under(src: &std::path::Path, under: &str) -> Vec<String> {
    let tests = graph::read(src, &[]).test_files;
    let mut files = Vec::new();
    rs_files(&src.join(under), &mut files);
    files.sort();
    files
        .iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(src).unwrap().display().to_string();
            if tests.contains(&rel) {
                return None;
            }
            let text = std::fs::read_to_string(f).unwrap();
            let names: Vec<String> = source::shipped_idents(&rel, &text)
                .into_iter()
                .filter(|i| names_the_judge(i))
                .collect();
            (!names.is_empty()).then(|| format!("{rel}: {}", names.join(", ")))
        })
        .collect()
}

/// The reports render what the judge decided and judge nothing: no code of
/// `harness/src/report/` that ships calls the judge's deciding or naming functions (its
/// headline, exit status, summary and expected-verdict match come in as the report's
/// `decision`; a rule is looked up by the verdict's own accessors).
#[test]
fn the_reports_call_no_judge() {
    let src = repo().join("harness/src");
    let mut files = Vec::new();
    rs_files(&src.join("report"), &mut files);
    assert!(files.len() > 10, "the walk found the reports");
    let bad = judge_names_under(&src, "report");
    assert!(
        bad.is_empty(),
        "harness/src/report/ calls the judge:\n{}",
        bad.join("\n")
    );
    // The scan sees a use in code that ships (inline or imported), and leaves comments, test
    // items and test modules out.
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("lib.rs", "pub mod report;\n"),
        (
            "report/mod.rs",
            "//! Not `judge_run`: words only.\n\
             use crate::compare::{ExpectedMismatch, Judged, Verdict};\n\
             #[cfg(test)]\nmod tests;\n\
             fn f() { crate::compare::stability::rule_id(\"m\"); }\n\
             #[cfg(test)]\nfn g() { judge_combined(); }\n",
        ),
        ("report/tests.rs", "use crate::compare::judge_run;\n"),
    ];
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    assert_eq!(
        judge_names_under(dir.path(), "report"),
        vec!["report/mod.rs: Judged, rule_id".to_string()]
    );
}

/// The torch engine (the `rlharness-torch` library, executable, tests and examples) builds on
/// the Arctic crate only: never on the harness (its spec loader, runner or commands).
#[test]
fn the_torch_crate_uses_the_arctic_crate_only() {
    let torch = repo().join("harness/torch");
    let mut files = Vec::new();
    for dir in ["src", "tests", "examples"] {
        rs_files(&torch.join(dir), &mut files);
    }
    let mut seen = BTreeSet::new();
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for p in paths::paths(&text, &["rlharness", "rlharness_arctic"]) {
            match p[0].as_str() {
                "rlharness_arctic" => {
                    seen.insert(p.get(1).cloned().unwrap_or_default());
                }
                _ => bad.push(format!("{}: uses `{}`", f.display(), p.join("::"))),
            }
        }
    }
    assert!(seen.contains("engine") && seen.contains("wire"), "{seen:?}");
    assert!(
        bad.is_empty(),
        "the torch crate uses the harness:\n{}",
        bad.join("\n")
    );
    let manifest = std::fs::read_to_string(torch.join("Cargo.toml")).unwrap();
    let deps: Vec<&str> = manifest
        .lines()
        .filter(|l| l.contains("{ path ="))
        .collect();
    assert!(
        deps.len() == 1 && deps[0].starts_with("rlharness-arctic "),
        "harness/torch/Cargo.toml depends on the Arctic crate only: {deps:?}"
    );
}

/// The checks see what they are for, on a crate written for it: an upward use, a module with
/// no layer, a ring of three siblings two folders down (through a nested `use` group), a ring
/// closed by code below a test module declared at the top of a file (`#[cfg(test)] mod
/// tests;`), and no ring where a child uses its hub or where only test code closes one.
#[test]
fn the_checks_see_an_upward_use_a_ring_of_three_and_an_unknown_module() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("lib.rs", "pub mod low;\npub mod high;\npub mod odd;\n"),
        (
            "low/mod.rs",
            "mod ring;\nmod ringt;\npub struct Hub;\nuse crate::high::H;\n",
        ),
        // A ring closed below a test module declared at the top: the code after it ships.
        ("low/ringt/mod.rs", "mod a;\nmod b;\n"),
        (
            "low/ringt/a.rs",
            "#[cfg(test)]\nmod tests;\npub struct A;\npub fn f() { super::b::g(); }\n",
        ),
        // Test code, which may reach its siblings: the `tests` file and a `#[test]` function.
        ("low/ringt/a/tests.rs", "use super::super::b::B;\n"),
        (
            "low/ringt/b.rs",
            "use super::a::A;\n#[test]\nfn t() { super::a::f(); }\n",
        ),
        ("low/ring/mod.rs", "mod a;\nmod b;\nmod c;\n"),
        ("low/ring/a.rs", "use super::{b::{B, self}};\n"),
        ("low/ring/b.rs", "use crate::low::ring::c::C;\n"),
        (
            "low/ring/c.rs",
            "pub fn f() { super::a::g(); super::super::Hub; }\n",
        ),
        ("high.rs", "use crate::low::Hub;\n"),
        ("odd.rs", "use crate::low::Hub;\n"),
    ];
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let graph = graph::read(dir.path(), &[]);
    let rings = graph.cycles();
    assert!(graph.undeclared.is_empty(), "{:?}", graph.undeclared);
    assert_eq!(rings.len(), 3, "{rings:?}");
    assert!(
        rings[0].contains("the crate root, a ring of 2: high -> low"),
        "{rings:?}"
    );
    assert!(
        rings[1].contains("`low::ring`, a ring of 3: a -> b (low/ring/a.rs), b -> c"),
        "{rings:?}"
    );
    assert_eq!(
        rings[2],
        "in `low::ringt`, a ring of 2: a -> b (low/ringt/a.rs), b -> a (low/ringt/b.rs)"
    );
    let test_only = graph
        .test_edges
        .keys()
        .filter(|e| e.folder == ["low", "ringt"]);
    assert_eq!(test_only.count(), 2, "{:?}", graph.test_edges);
    let layers = vec![vec!["low".to_string()], vec!["high".to_string()]];
    let bad = violations(&layers, &graph);
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad
        .iter()
        .any(|b| b.contains("`low` (layer 0) uses `high` (layer 1)")));
    assert!(bad.iter().any(|b| b.contains("module `odd` has no layer")));
    let doc = "# x\n## Layers\n| layer | modules |\n|---|---|\n| 0 low | `low`, `x` | a |\n\
               | 1 high | `high` | b |\n## Next\n| 2 no | `no` |\n";
    assert_eq!(
        layers_of_doc(doc, "Layers"),
        vec![
            vec!["low".to_string(), "x".to_string()],
            vec!["high".to_string()]
        ]
    );
}
