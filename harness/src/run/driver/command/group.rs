//! Process groups: whether one is alive, and stopping it (TERM, then KILL).

use std::time::Duration;

/// Whether any process of group `pgid` is still alive (zombies count as dead). Reads `/proc`
/// where it exists; elsewhere asks the kernel with signal 0 (zombies then count as alive).
pub fn group_alive(pgid: i32) -> bool {
    if pgid <= 0 {
        return false;
    }
    match std::fs::read_dir("/proc") {
        Ok(entries) => entries.flatten().any(|e| {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                return false;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            proc_stat_group(&stat)
                .is_some_and(|(state, pgrp)| pgrp == pgid && state != 'Z' && state != 'X')
        }),
        // SAFETY: killpg with signal 0 only checks for existence and permission.
        Err(_) => unsafe { libc::killpg(pgid, 0) == 0 },
    }
}

/// `(state, process group)` from a `/proc/<pid>/stat` line; the command name may hold spaces
/// and parentheses, so fields are counted after its last `)`.
pub(super) fn proc_stat_group(stat: &str) -> Option<(char, i32)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

pub(super) fn signal_group(pgid: i32, sig: libc::c_int) {
    if pgid > 0 {
        // SAFETY: plain syscall on a process group this harness created; errors (ESRCH when
        // the group is gone) are the expected outcome and ignored.
        unsafe {
            libc::killpg(pgid, sig);
        }
    }
}

/// TERM the group, wait up to `grace` for it to go, then KILL what is left.
pub(crate) async fn terminate_group(pgid: i32, grace: Duration) {
    if !group_alive(pgid) {
        return;
    }
    signal_group(pgid, libc::SIGTERM);
    let step = Duration::from_millis(50);
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        if !group_alive(pgid) {
            return;
        }
        tokio::time::sleep(step).await;
    }
    signal_group(pgid, libc::SIGKILL);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while group_alive(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(step).await;
    }
}
