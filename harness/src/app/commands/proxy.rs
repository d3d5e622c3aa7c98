//! `rlharness proxy`: the recording proxy in the foreground, in front of a backend.

use std::time::Duration;

use crate::cli::ProxyArgs;
use crate::error::{CommandError, ExitStatus};
use crate::proxy::{self, ProxyConfig};

pub(crate) async fn proxy(args: ProxyArgs) -> Result<ExitStatus, CommandError> {
    let cfg = ProxyConfig {
        upstream: args.upstream.clone(),
        record_dir: args.record.clone(),
        body_limit: args.body_limit,
        request_timeout: Duration::from_secs(args.timeout_s),
    };
    proxy::run_standalone(&args.listen, cfg)
        .await
        .map_err(|e| CommandError::run_failed(format!("proxy: {e}")))?;
    Ok(ExitStatus::Passed)
}
