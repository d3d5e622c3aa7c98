//! What the judge adds to a run's TensorBoard event files once it has decided: the series the
//! run was judged against as `golden/<metric>` (the golden, or a self-test's reference run),
//! and each compared point's band as `band/<rule>/lo` and `band/<rule>/hi`, at every step of
//! the step or window it applies to (an open side is left out). Read off the report, as the
//! plots draw them; nothing is judged again.

use std::collections::BTreeMap;

use super::Report;

/// The scalars to add, by step, tags in a stable order.
pub(crate) fn judged_scalars(r: &Report) -> BTreeMap<u64, Vec<(String, f64)>> {
    let mut out: BTreeMap<u64, BTreeMap<String, f64>> = BTreeMap::new();
    if let Some(reference) = &r.reference {
        for row in reference.table.rows() {
            let at = out.entry(row.step).or_default();
            for (metric, v) in &row.values {
                at.insert(format!("golden/{metric}"), *v);
            }
        }
    }
    for rule in r.verdict.iter().flat_map(|v| &v.rules) {
        for p in &rule.points {
            for step in p.first..=p.last {
                let at = out.entry(step).or_default();
                if let Some(lo) = p.band.lo {
                    at.insert(format!("band/{}/lo", rule.rule), lo);
                }
                if let Some(hi) = p.band.hi {
                    at.insert(format!("band/{}/hi", rule.rule), hi);
                }
            }
        }
    }
    out.into_iter()
        .map(|(step, tags)| (step, tags.into_iter().collect()))
        .filter(|(_, tags): &(u64, Vec<_>)| !tags.is_empty())
        .collect()
}
