//! The scenario slot a run executes in when several run side by side (`run --jobs`): the
//! environment of its child processes, its progress group, its output label. Set by the
//! scheduler (`app::scale`) as a task-local value, read by the stages that start processes.

/// Where one scenario of a local matrix runs: the environment its child processes get (the
/// torch backend's process, an external trainer), e.g. `CUDA_VISIBLE_DEVICES` of the GPU it was
/// given, the progress group its bar joins, and the label that prefixes its children's
/// output. Scoped to the scenario's task ([`SLOT`]), so the process environment of the harness
/// is never changed and scenarios side by side never see each other's pinning.
#[derive(Debug, Clone, Default)]
pub(crate) struct Slot {
    pub(crate) env: Vec<(String, String)>,
    pub(crate) progress: Option<indicatif::MultiProgress>,
    pub(crate) label: Option<String>,
}

tokio::task_local! {
    pub(crate) static SLOT: Slot;
}

/// The current scenario's slot (empty outside a matrix).
pub(crate) fn current_slot() -> Slot {
    SLOT.try_with(Slot::clone).unwrap_or_default()
}
