//! The import direction of the three crates' sources, checked from their files:
//! - `harness/src` is one folder per floor, in the order the data flows: its top-level modules
//!   are exactly the folders of `docs/architecture.md`'s "Layers" table, in the table's order
//!   (read from the doc, so the doc and the check are one table); a floor uses only itself and
//!   the floors before it; inside a floor whose row names modules, each module sits in the
//!   row's layer and uses only its own layer and those below;
//! - at the top of `harness/arctic/src`, the same against the "Arctic layers" table;
//! - inside every folder module of the three crates, siblings never use each other in a ring,
//!   of any length (`graph.rs` says what counts as a use);
//! - the torch engine (`harness/torch`: library, executable, tests and examples) uses the
//!   Arctic crate only, never the harness (`rlharness`), and its manifest depends on no other
//!   crate of the workspace; cargo itself rejects a cycle between the crates.

mod graph;
mod paths;
mod source;

use std::collections::{BTreeMap, BTreeSet};

use crate::common::repo;
use graph::{Edge, Graph, ModPath};

/// The rows of the section `title`'s table of `docs/architecture.md` (those whose first cell
/// starts with a layer number), lowest first: each cell's names written in backticks.
fn rows_of_doc(doc: &str, title: &str) -> Vec<Vec<Vec<String>>> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with(title))
        .unwrap_or_else(|| panic!("docs/architecture.md has a section {title}"));
    section
        .lines()
        .filter(|l| l.starts_with("| ") && l.as_bytes().get(2).is_some_and(u8::is_ascii_digit))
        .map(|row| {
            row.split('|')
                .skip(2)
                .map(|cell| {
                    cell.split('`')
                        .skip(1)
                        .step_by(2)
                        .map(str::to_string)
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// A table of the old shape (`| layer | modules | what |`), lowest first: each row's modules.
fn layers_of_doc(doc: &str, title: &str) -> Vec<Vec<String>> {
    rows_of_doc(doc, title)
        .into_iter()
        .map(|mut cells| cells.swap_remove(0))
        .collect()
}

/// One row of the harness's table: a layer, the floor folder it sits in, and the floor's
/// modules of that layer (none: the folder is one module, the whole floor).
#[derive(Debug, PartialEq)]
struct Row {
    folder: String,
    modules: Vec<String>,
}

/// The harness's "Layers" table (`| layer | folder | modules | what |`), lowest first.
fn floor_rows(doc: &str) -> Vec<Row> {
    rows_of_doc(doc, "Layers")
        .into_iter()
        .map(|cells| {
            let folder = cells.first().and_then(|c| c.first()).cloned();
            let folder = folder.unwrap_or_default();
            Row {
                folder: folder.trim_end_matches('/').to_string(),
                modules: cells.get(1).cloned().unwrap_or_default(),
            }
        })
        .collect()
}

fn doc_rows() -> Vec<Row> {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let rows = floor_rows(&doc);
    assert!(rows.len() > 5, "the table was read: {rows:?}");
    rows
}

/// The floors in the table's order (each folder once, where it first appears) and what the
/// table gets wrong about their order: a floor whose rows are not next to each other.
fn floors_of(rows: &[Row]) -> (Vec<String>, Vec<String>) {
    let mut floors: Vec<String> = Vec::new();
    let mut wrong = Vec::new();
    for r in rows {
        match floors.iter().position(|f| *f == r.folder) {
            Some(i) if i + 1 != floors.len() => wrong.push(format!(
                "floor `{}` comes back after `{}`",
                r.folder,
                floors[i + 1]
            )),
            Some(_) => {}
            None => floors.push(r.folder.clone()),
        }
    }
    (floors, wrong)
}

/// The layers each folder's children must keep, by folder: the crate root's are the floors
/// (each floor one layer, in data-flow order); a floor whose rows name modules has one layer
/// per row.
fn layering(rows: &[Row]) -> BTreeMap<ModPath, Vec<Vec<String>>> {
    let (floors, _) = floors_of(rows);
    let mut by_folder = BTreeMap::new();
    by_folder.insert(Vec::new(), floors.iter().map(|f| vec![f.clone()]).collect());
    for r in rows.iter().filter(|r| !r.modules.is_empty()) {
        by_folder
            .entry(vec![r.folder.clone()])
            .or_insert_with(Vec::new)
            .push(r.modules.clone());
    }
    by_folder
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

/// The child modules of `folder` (a module path; `[]` the crate root) of the crate under
/// `src` (relative to the repository).
fn children(src: &str, folder: &[String]) -> BTreeSet<String> {
    graph::read(&repo().join(src), &[])
        .modules
        .iter()
        .filter(|m| m.len() == folder.len() + 1 && m.starts_with(folder))
        .map(|m| m[folder.len()].clone())
        .collect()
}

/// What a table gets wrong against a folder's child modules `top`: modules it leaves out,
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

/// What breaks the layering, one line per edge: `layering` says, for each folder it names,
/// the layers of that folder's children (edges inside other folders only count for rings).
fn violations(layering: &BTreeMap<ModPath, Vec<Vec<String>>>, graph: &Graph) -> Vec<String> {
    let mut bad = Vec::new();
    for (Edge { folder, from, to }, file) in graph.edges.iter().chain(&graph.test_edges) {
        let Some(layers) = layering.get(folder) else {
            continue;
        };
        let at = if folder.is_empty() {
            String::new()
        } else {
            format!(" in `{}`", folder.join("::"))
        };
        match (layer_of(layers, from), layer_of(layers, to)) {
            (None, _) => bad.push(format!("{file}: module `{from}`{at} has no layer")),
            (_, None) => bad.push(format!("{file}: uses `{to}`{at}, which has no layer")),
            (Some(a), Some(b)) if b > a => bad.push(format!(
                "{file}: `{from}` (layer {a}) uses `{to}` (layer {b}){at}, above it"
            )),
            _ => {}
        }
    }
    bad
}

/// The root's layers only (the Arctic crate's table, the fixture's).
fn at_root(layers: Vec<Vec<String>>) -> BTreeMap<ModPath, Vec<Vec<String>>> {
    BTreeMap::from([(Vec::new(), layers)])
}

#[test]
fn no_module_uses_one_above_it() {
    let graph = graph::read(&repo().join("harness/src"), &[]);
    assert!(graph.edges.len() > 40, "the walk found the tree");
    let bad = violations(&layering(&doc_rows()), &graph);
    assert!(bad.is_empty(), "upward imports:\n{}", bad.join("\n"));
}

/// `harness/src` holds `lib.rs`, `main.rs` and one folder per floor, the table's floors in
/// its order; a floor's rows name each of its modules once.
#[test]
fn the_floors_are_the_folders_of_the_docs_table() {
    let rows = doc_rows();
    let (floors, wrong) = floors_of(&rows);
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's Layers table: {wrong:?}"
    );
    let src = repo().join("harness/src");
    let mut entries: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    let mut expected: Vec<String> = floors.clone();
    expected.extend(["lib.rs".to_string(), "main.rs".to_string()]);
    expected.sort();
    assert_eq!(
        entries, expected,
        "harness/src against the table's floors {floors:?}"
    );
    for f in &floors {
        assert!(
            src.join(f).join("mod.rs").is_file(),
            "harness/src/{f}/mod.rs"
        );
    }
    let top = children("harness/src", &[]);
    assert_eq!(
        top,
        floors.iter().cloned().collect::<BTreeSet<_>>(),
        "lib.rs declares the floors"
    );
    for (folder, layers) in layering(&rows).iter().filter(|(f, _)| !f.is_empty()) {
        let wrong = table_against(layers, &children("harness/src", folder));
        assert!(
            wrong.is_empty(),
            "docs/architecture.md's Layers table against harness/src/{}: {wrong}",
            folder.join("/")
        );
    }
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
    let wrong = table_against(&layers, &children("harness/arctic/src", &[]));
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's Arctic layers table against harness/arctic/src: {wrong}"
    );
    let graph = graph::read(&repo().join("harness/arctic/src"), &["rlharness"]);
    assert!(graph.edges.len() > 10, "the walk found the tree");
    let bad = violations(&at_root(layers), &graph);
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
        (
            "low/ringt/mod.rs",
            "mod a;\nmod b;\npub fn up() { crate::low::ring::f(); }\n",
        ),
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
    let bad = violations(&at_root(layers.clone()), &graph);
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad
        .iter()
        .any(|b| b.contains("`low` (layer 0) uses `high` (layer 1)")));
    assert!(bad.iter().any(|b| b.contains("module `odd` has no layer")));
    // Inside a floor, its rows' layers: `ringt` below `ring` uses it.
    let mut floors = at_root(layers);
    floors.insert(
        vec!["low".to_string()],
        vec![vec!["ringt".to_string()], vec!["ring".to_string()]],
    );
    let bad = violations(&floors, &graph);
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad.iter().any(|b| b
        .contains("low/ringt/mod.rs: `ringt` (layer 0) uses `ring` (layer 1) in `low`, above it")));
    // The floors' table: a folder per row, its modules, and a floor that comes back is wrong.
    let doc = "# x\n## Layers\n| layer | folder | modules | what |\n|---|---|---|---|\n\
               | 0 a | `base/` | `x`, `y` | a |\n| 1 b | `base/` | `z` | b |\n\
               | 2 c | `top/` | the folder | c |\n| 3 d | `base/` | `w` | d |\n";
    let rows = floor_rows(doc);
    assert_eq!(rows.len(), 4);
    assert_eq!(
        rows[0],
        Row {
            folder: "base".to_string(),
            modules: vec!["x".to_string(), "y".to_string()]
        }
    );
    assert!(rows[2].modules.is_empty(), "{rows:?}");
    let (floors, wrong) = floors_of(&rows);
    assert_eq!(floors, ["base", "top"]);
    assert_eq!(wrong, ["floor `base` comes back after `top`"]);
    let by_folder = layering(&rows[..3]);
    assert_eq!(by_folder[&Vec::<String>::new()], [["base"], ["top"]]);
    assert_eq!(by_folder[&vec!["base".to_string()]].len(), 2);
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
