//! Small helpers of both crates: a lock that survives a panic elsewhere, and hex text of bytes.

use std::sync::{Mutex, MutexGuard};

/// Lock `m` even if a thread panicked while holding it. Callers update what it guards in
/// single statements, so its content stays consistent; a panic elsewhere must not take the
/// server or the run down with a poisoned lock.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
