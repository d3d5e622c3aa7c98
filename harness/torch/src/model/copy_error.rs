//! Why a weight copy into a model was refused.

/// A weight copy (weight sync, checkpoint or warm-start load) whose source does not fit the
/// model: another number of tensors, or a tensor of another shape.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("weight copy: {got} tensors for a model of {want}")]
    Count { got: usize, want: usize },
    #[error("weight copy: {name} has shape {want:?}, source {got:?}")]
    Shape {
        name: String,
        want: Vec<i64>,
        got: Vec<i64>,
    },
}
