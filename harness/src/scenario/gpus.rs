//! The GPUs of this host, as `nvidia-smi` lists them (for `requires.gpus`).

/// Why no GPU could be listed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GpuQueryError {
    #[error("nvidia-smi not found")]
    NotFound,
    #[error("nvidia-smi failed to start: {0}")]
    Start(std::io::Error),
    #[error("nvidia-smi failed: {0}")]
    Failed(String),
}

/// The names of the GPUs `nvidia-smi` lists, or why none could be listed.
pub(crate) fn detect_gpus() -> Result<Vec<String>, GpuQueryError> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader"])
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => GpuQueryError::NotFound,
            _ => GpuQueryError::Start(e),
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(GpuQueryError::Failed(stderr.trim().to_string()));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}
