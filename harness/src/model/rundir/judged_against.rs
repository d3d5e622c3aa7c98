//! What a run's verdict was judged against, as `run.json` records it: the golden's files by
//! digest and the calibrated bands as resolved. The golden store computes them; the run
//! directory keeps them.

/// What a verdict was judged against, by SHA-256 (carriage returns dropped, as
/// `metrics_digest`): the golden's `metrics.csv` and `golden.yaml` together (a self-test's
/// reference run: its `metrics.csv`), and its `calibration.json`. `run.json` records it;
/// `compare RUN` says when the files changed since.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GoldenDigest {
    pub golden: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
}

/// What a run's verdict was judged against (`run.json`'s `judged_against`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JudgedAgainst {
    #[serde(flatten)]
    pub digest: GoldenDigest,
    /// Per calibrated golden rule (`golden:<metric>`), its band as resolved.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub bands: std::collections::BTreeMap<String, String>,
}

impl JudgedAgainst {
    /// What differs between what a verdict was judged against then (`self`) and now, in words:
    /// the golden's files, its calibration, the calibrated bands as resolved. `None` when
    /// nothing did; "the golden (gone)" when there is none now.
    pub(crate) fn changes_to(&self, now: Option<&JudgedAgainst>) -> Option<String> {
        let Some(now) = now else {
            return Some("the golden (gone)".into());
        };
        let mut parts: Vec<String> = self.digest.changes(&now.digest).into_iter().collect();
        let moved: Vec<&String> = self
            .bands
            .iter()
            .filter(|(rule, band)| now.bands.get(*rule) != Some(*band))
            .map(|(rule, _)| rule)
            .chain(now.bands.keys().filter(|r| !self.bands.contains_key(*r)))
            .collect();
        if !moved.is_empty() {
            parts.push(format!(
                "the resolved bands of {}",
                moved
                    .iter()
                    .map(|r| format!("`{r}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        (!parts.is_empty()).then(|| parts.join(" and "))
    }
}

impl GoldenDigest {
    /// What differs from `now`, in words ("the golden (sha a → b)"); `None` when nothing does.
    pub(crate) fn changes(&self, now: &GoldenDigest) -> Option<String> {
        let short = |s: &str| s[..s.len().min(12)].to_string();
        let mut parts = Vec::new();
        if self.golden != now.golden {
            parts.push(format!(
                "the golden's series or header (sha {} → {})",
                short(&self.golden),
                short(&now.golden)
            ));
        }
        if self.calibration != now.calibration {
            let opt = |c: &Option<String>| c.as_deref().map_or("none".to_string(), short);
            parts.push(format!(
                "its calibration (sha {} → {})",
                opt(&self.calibration),
                opt(&now.calibration)
            ));
        }
        (!parts.is_empty()).then(|| parts.join(" and "))
    }
}
