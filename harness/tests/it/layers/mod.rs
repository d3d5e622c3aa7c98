//! The import direction of the two crates' sources, checked from their files:
//! - at the top of `harness/src`, every module sits in a layer of `docs/architecture.md`'s
//!   "Layers" table (read from the doc, so the doc and the check are one table), and uses only
//!   its own layer and those below;
//! - inside every folder module of both crates, siblings never use each other in a ring, of
//!   any length (`graph.rs` says what counts as a use);
//! - the torch engine (`harness/torch`, its executable's `main.rs` aside) uses the harness's
//!   backend layer and what is below it, nothing above.

mod graph;
mod paths;

use std::collections::BTreeSet;

use crate::common::repo;
use graph::{Edge, Graph};

/// The "Layers" table of `docs/architecture.md`, lowest first: each row's module names.
fn layers_of_doc(doc: &str) -> Vec<Vec<String>> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("docs/architecture.md has a Layers section");
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
    let layers = layers_of_doc(&doc);
    assert!(layers.len() > 5, "the table was read: {layers:?}");
    layers
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
    let graph = graph::read(&repo().join("harness/src"), &[]);
    let top: BTreeSet<String> = graph
        .modules
        .iter()
        .filter(|m| m.len() == 1)
        .map(|m| m[0].clone())
        .collect();
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
    assert!(
        missing.is_empty() && stale.is_empty() && twice.is_empty(),
        "docs/architecture.md's Layers table against harness/src: missing {missing:?}, \
         naming no module {stale:?}, named twice {twice:?}"
    );
}

#[test]
fn no_siblings_use_each_other_in_a_ring() {
    for src in ["harness/src", "harness/torch/src"] {
        let graph = graph::read(&repo().join(src), &[]);
        let rings = graph.cycles();
        assert!(rings.is_empty(), "{src}:\n{}", rings.join("\n"));
    }
}

/// The torch engine (the `rlharness-torch` library; its executable's `main.rs` is a command and
/// may use any layer) builds on the backend layer and what is below it, never on the spec
/// loader, the runner or the commands.
#[test]
fn the_torch_engine_uses_nothing_above_the_backend_layer() {
    let layers = doc_layers();
    let top = layer_of(&layers, "backend").unwrap();
    let graph = graph::read(&repo().join("harness/torch/src"), &["rlharness"]);
    let mut seen = BTreeSet::new();
    let mut bad = Vec::new();
    for (file, path) in &graph.external {
        if file == "main.rs" {
            continue;
        }
        let used = path.get(1).cloned().unwrap_or_default();
        match layer_of(&layers, &used) {
            Some(l) if l <= top => {
                seen.insert(used);
            }
            _ => bad.push(format!(
                "harness/torch/src/{file}: uses `rlharness::{used}`"
            )),
        }
    }
    assert!(
        seen.contains("backend") && seen.contains("wire"),
        "{seen:?}"
    );
    assert!(
        bad.is_empty(),
        "above the backend layer:\n{}",
        bad.join("\n")
    );
}

/// The checks see what they are for, on a crate written for it: an upward use, a module with
/// no layer, a ring of three siblings two folders down (through a nested `use` group), and
/// no ring where a child uses its hub.
#[test]
fn the_checks_see_an_upward_use_a_ring_of_three_and_an_unknown_module() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("lib.rs", "pub mod low;\npub mod high;\npub mod odd;\n"),
        (
            "low/mod.rs",
            "mod ring;\npub struct Hub;\nuse crate::high::H;\n",
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
    assert_eq!(rings.len(), 2, "{rings:?}");
    assert!(
        rings[0].contains("the crate root, a ring of 2: high -> low"),
        "{rings:?}"
    );
    assert!(
        rings[1].contains("`low::ring`, a ring of 3: a -> b (low/ring/a.rs), b -> c"),
        "{rings:?}"
    );
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
        layers_of_doc(doc),
        vec![
            vec!["low".to_string(), "x".to_string()],
            vec!["high".to_string()]
        ]
    );
}
