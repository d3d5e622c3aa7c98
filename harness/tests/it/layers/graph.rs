//! A crate's module tree read from its files, and the edges between modules that its paths
//! make: for each folder module, which of its children use which.
//!
//! A folder's `mod.rs` (the crate root's `lib.rs` and `main.rs`) is its hub: it declares and
//! glues its children, and they may use what it defines, so edges into and out of a hub are
//! not counted. Between siblings every edge counts, at every depth: `a.rs` using
//! `super::b::X` is the edge `a -> b` in the folder, and `crate::x::y::f` from `crate::z::w`
//! is the edge `z -> x` at the crate's top. Test code (a
//! `#[cfg(test)]` module, inline or a file of its own, and every item under a test attribute:
//! `source.rs` says which) is kept apart: its uses count for the layers but not for rings,
//! since tests reach across their module on purpose. A path written inside an inline module
//! is resolved from that module (`super::` in `mod tests { .. }` is the file's own module).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::paths::Written;
use super::source::{self, Source};

/// A module's path from the crate root (`[]` is the root).
pub type ModPath = Vec<String>;

/// One edge between two children of one folder module, with a file that shows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub folder: ModPath,
    pub from: String,
    pub to: String,
}

/// A crate's modules and the edges between siblings.
pub struct Graph {
    pub modules: BTreeSet<ModPath>,
    /// The edges of code that ships.
    pub edges: BTreeMap<Edge, String>,
    /// The edges of test code only.
    pub test_edges: BTreeMap<Edge, String>,
    /// Paths into other crates (`rlharness::a::...` from the torch crate): (file, path).
    pub external: Vec<(String, Written)>,
    /// Files no `mod` declaration reaches.
    pub undeclared: Vec<String>,
    /// The files of test modules (declared under a test attribute, or inside one).
    pub test_files: BTreeSet<String>,
}

fn rs_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
}

/// The module a file defines: `a/b.rs` and `a/b/mod.rs` are `[a, b]`; `lib.rs` the root.
fn module_of(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// Read the crate under `src`; `externs` are other crates' names whose paths are kept.
pub fn read(src: &Path, externs: &[&str]) -> Graph {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    files.sort();
    let mut roots = vec!["crate", "super", "self"];
    roots.extend(externs);
    let read: Vec<(String, ModPath, Source)> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap().display().to_string();
            let text = std::fs::read_to_string(f).unwrap();
            let source = source::read(&rel, &text, &roots);
            (rel, module_of(f.strip_prefix(src).unwrap()), source)
        })
        .collect();
    let modules: BTreeSet<ModPath> = read.iter().map(|t| t.1.clone()).collect();
    // Every module declared with a file of its own, and whether under a test attribute.
    let mut declared: BTreeMap<ModPath, bool> = BTreeMap::new();
    for (_, module, source) in &read {
        for d in &source.declared {
            let mut m = module.clone();
            m.extend(d.module.iter().cloned());
            declared.insert(m, d.test);
        }
    }
    let test_module =
        |m: &ModPath| (1..=m.len()).any(|n| declared.get(&m[..n]).copied().unwrap_or(false));
    let mut graph = Graph {
        modules,
        edges: BTreeMap::new(),
        test_edges: BTreeMap::new(),
        external: Vec::new(),
        undeclared: Vec::new(),
        test_files: BTreeSet::new(),
    };
    for (rel, module, source) in &read {
        if !module.is_empty() && !declared.contains_key(module) {
            graph.undeclared.push(rel.clone());
        }
        let test_file = test_module(module);
        if test_file {
            graph.test_files.insert(rel.clone());
        }
        for u in &source.uses {
            if externs.contains(&u.path[0].as_str()) {
                graph.external.push((rel.clone(), u.path.clone()));
                continue;
            }
            let mut from = module.clone();
            from.extend(u.inline.iter().cloned());
            if let Some(target) = resolve(&from, &u.path) {
                graph.add(&from, &target, rel, test_file || u.test);
            }
        }
    }
    graph
}

/// The module path a written path points into (`None` for a path that leaves the crate).
fn resolve(module: &ModPath, written: &Written) -> Option<ModPath> {
    let mut segs = written.iter();
    let mut base = match segs.next()?.as_str() {
        "crate" => Vec::new(),
        "self" => module.clone(),
        "super" => module[..module.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    let mut rest: Vec<&String> = segs.collect();
    while rest.first().is_some_and(|s| *s == "super") {
        base.pop()?;
        rest.remove(0);
    }
    base.extend(rest.into_iter().cloned());
    Some(base)
}

impl Graph {
    /// The longest prefix of `target` that is a module of the crate.
    fn module_prefix(&self, target: &ModPath) -> ModPath {
        (0..=target.len())
            .rev()
            .map(|n| target[..n].to_vec())
            .find(|p| self.modules.contains(p))
            .unwrap_or_default()
    }

    /// An edge from `from` to the module `target` points into. A hub's uses of its own
    /// children are glue; its uses elsewhere count as its folder's.
    fn add(&mut self, from: &ModPath, target: &ModPath, file: &str, test: bool) {
        let to = self.module_prefix(target);
        let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        // An ancestor (its hub's items) or a descendant: not an edge between siblings.
        if common == from.len() || common == to.len() {
            return;
        }
        let edge = Edge {
            folder: from[..common].to_vec(),
            from: from[common].clone(),
            to: to[common].clone(),
        };
        let map = if test {
            &mut self.test_edges
        } else {
            &mut self.edges
        };
        map.entry(edge).or_insert_with(|| file.to_string());
    }

    /// Every set of siblings that use each other in a ring, with the edges that close it.
    pub fn cycles(&self) -> Vec<String> {
        let mut by_folder: BTreeMap<&ModPath, Vec<(&str, &str)>> = BTreeMap::new();
        for e in self.edges.keys() {
            by_folder
                .entry(&e.folder)
                .or_default()
                .push((&e.from, &e.to));
        }
        let mut out = Vec::new();
        for (folder, edges) in by_folder {
            for ring in rings(&edges) {
                let shown: Vec<String> = ring
                    .iter()
                    .flat_map(|a| {
                        ring.iter().filter_map(move |b| {
                            let e = Edge {
                                folder: folder.clone(),
                                from: a.to_string(),
                                to: b.to_string(),
                            };
                            self.edges.get(&e).map(|f| format!("{a} -> {b} ({f})"))
                        })
                    })
                    .collect();
                let name = if folder.is_empty() {
                    "the crate root".to_string()
                } else {
                    format!("`{}`", folder.join("::"))
                };
                out.push(format!(
                    "in {name}, a ring of {}: {}",
                    ring.len(),
                    shown.join(", ")
                ));
            }
        }
        out
    }
}

/// The strongly connected sets of more than one node (Tarjan's algorithm).
fn rings<'a>(edges: &[(&'a str, &'a str)]) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        adj: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.adj.get(v).cloned().unwrap_or_default() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w);
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.out.push(set);
            }
        }
    }
    let mut s = State {
        adj: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for (a, b) in edges {
        s.adj.entry(a).or_default().push(b);
    }
    let nodes: Vec<&str> = s.adj.keys().copied().collect();
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}
