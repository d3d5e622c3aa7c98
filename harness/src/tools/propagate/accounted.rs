//! Every key of a scenario's resolved config accounted for: a knob of the manifest, with where
//! the adapter sends it and the server reads it, or declared `not_sent` with the reason. A key
//! that is neither is unaccounted: nothing would show whether it reaches the server, so
//! `rlharness check` refuses it and `propagate` lists it first (and fails).

use serde::{Deserialize, Serialize};

use super::knob_manifest::{self, KnobManifest};
use crate::report::doc::{marked, plain, Block, Inline};
use crate::scenario::Scenario;

/// A config key the manifest does not account for, and where its value comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unaccounted {
    pub path: String,
    /// `default (file:line)` for a key of the defaults or an included layer, else the
    /// scenario's `file:line:col` or `--set ...`.
    pub origin: String,
}

/// The leaves of `s`'s resolved config (defaults and layers included) that `m` accounts for
/// neither as a knob nor as `not_sent`, in path order.
pub(crate) fn unaccounted(m: &KnobManifest, s: &Scenario) -> Vec<Unaccounted> {
    let leaves = s.config.leaves();
    let missing = knob_manifest::unaccounted(m, leaves.iter().map(|(p, _)| p.as_str()));
    leaves
        .iter()
        .filter(|(p, _)| missing.contains(&p.as_str()))
        .map(|(p, r)| Unaccounted {
            path: p.clone(),
            origin: r.origin.to_string(),
        })
        .collect()
}

/// What to do about an unaccounted key, in the words `check` and `propagate` both use.
pub(crate) fn advice(manifest: &str) -> String {
    format!(
        "the knob manifest {manifest} neither lists it (with where the adapter sends it and the \
         server reads it) nor declares it `not_sent` (with the reason): add one or the other"
    )
}

/// The section's title.
pub(crate) const TITLE: &str = "Knobs the manifest does not account for";

/// The section of the propagation report, as blocks of its document.
pub(crate) fn blocks(u: &[Unaccounted], manifest: &str) -> Vec<Block> {
    let mut out = vec![Block::Heading {
        level: 2,
        class: Some("fail"),
        text: plain(TITLE),
    }];
    if u.is_empty() {
        out.push(Block::Paragraph(marked(
            "None: every key of the scenario's resolved config is a knob of the manifest or \
             declared not sent to the backend.",
        )));
        return out;
    }
    out.push(Block::Paragraph(marked(&format!(
        "**FLAGGED**: {}.",
        advice(manifest)
    ))));
    out.push(Block::List(
        u.iter()
            .map(|k| {
                vec![
                    Inline::Code(k.path.clone()),
                    Inline::Plain(format!(" ({})", k.origin)),
                ]
            })
            .collect(),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(text: &str) -> KnobManifest {
        knob_manifest::parse(text, std::path::Path::new("m.yaml")).unwrap()
    }

    #[test]
    fn knobs_subtrees_and_not_sent_entries_account_for_leaves() {
        let m = manifest(
            "backend: x\nbackend_yaml: b.yaml\nbackend_prefix: rb\nknobs:\n  \
             - {path: rb.a, default: 1, try: [2], consumers: [{at: meta.a}]}\n  \
             - {path: rb.ds, default: {}, try: [{x: 1}], consumers: [{at: meta.ds}]}\n\
             not_sent:\n  - {path: trainer, reason: verl's own loop}\n  \
             - {path: data.train_files, reason: read by verl}\n",
        );
        assert!(
            knob_manifest::validate(&m).is_empty(),
            "{:?}",
            knob_manifest::validate(&m)
        );
        let leaves = [
            "rb.a",
            "rb.ds.stage",
            "trainer.logger",
            "data.train_files",
            "data.train_filesx",
            "rb.ab",
            "data.val_files",
        ];
        assert_eq!(
            knob_manifest::unaccounted(&m, leaves),
            vec!["data.train_filesx", "rb.ab", "data.val_files"]
        );
    }

    #[test]
    fn a_not_sent_entry_needs_a_reason_and_is_no_knob() {
        let m = manifest(
            "backend: x\nbackend_yaml: b.yaml\nbackend_prefix: rb\nknobs:\n  \
             - {path: rb.a, default: 1, try: [2], consumers: [{at: meta.a}]}\n\
             not_sent:\n  - {path: rb.a, reason: x}\n  - {path: t, reason: ' '}\n  \
             - {path: t, reason: again}\n",
        );
        let p = knob_manifest::validate(&m);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].contains("`rb.a`: also a knob"), "{p:?}");
        assert!(p[1].contains("`t`: give the reason"), "{p:?}");
        assert!(p[2].contains("`t`: listed twice"), "{p:?}");
    }
}
