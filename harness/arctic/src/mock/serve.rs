//! The mock served standalone (`rlharness serve mock`).

use std::io::Write as _;
use std::sync::Arc;

use super::{faults, MockEngine, MockScript};
use crate::server::{self, ServerOptions};

/// Serve the mock standalone (`rlharness serve mock`) until Ctrl-C.
pub async fn serve_mock_standalone(
    host: &str,
    port: u16,
    script: MockScript,
    seed: u64,
) -> std::io::Result<()> {
    let script_faults = script.faults.clone();
    let engine = MockEngine::new(script, seed)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = server::bind(&format!("{host}:{port}"))
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("failed to bind {host}:{port}: {e}")))?;
    let addr = listener.local_addr()?;
    let seed = engine.seed;
    let (router, handle) = server::router(Arc::new(engine), ServerOptions::default());
    let router = faults::inject(router, handle, &script_faults, seed);
    // Never a panic on a closed pipe (`rlharness serve mock | head -1`).
    let _ = writeln!(
        std::io::stdout().lock(),
        "mock Arctic server listening on http://{addr}"
    );
    server::serve(listener, router, async {
        // If the signal handler cannot be installed, serve until the process is killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
    .await
}
