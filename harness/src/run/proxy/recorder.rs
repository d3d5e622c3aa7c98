//! The files a proxy writes (`wire.jsonl`, `server_config.json`, the cassette) and what the
//! hang report shows.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Map, Value};

use crate::model::events::{EventSender, RunEvent};
use rlharness_arctic::fsx::{self, FsError};

/// What the hang report shows: the requests still open and the last one that finished.
#[derive(Default)]
pub(super) struct Activity {
    pub(super) in_flight: BTreeMap<u64, (String, Instant)>,
    pub(super) last_done: Option<(String, u16, f64, Instant)>,
    /// Per `METHOD /route`: the requests, those not answered 2xx, and their total time (what
    /// `-v` shows when the proxy stops).
    pub(super) per_route: BTreeMap<String, RouteTally>,
}

#[derive(Default)]
pub(super) struct RouteTally {
    pub(super) count: u64,
    pub(super) failed: u64,
    pub(super) seconds: f64,
}

/// The files a proxy writes, shared by all exchanges.
pub(super) struct Recorder {
    pub(super) wire_path: PathBuf,
    pub(super) wire: Mutex<File>,
    pub(super) config_path: PathBuf,
    pub(super) configs: Mutex<Map<String, Value>>,
    pub(super) events: Option<EventSender>,
    /// First write error: recorded once as a warning, the traffic keeps flowing.
    pub(super) failed: Mutex<Option<String>>,
}

impl Recorder {
    pub(super) fn open(dir: &Path, events: Option<EventSender>) -> Result<Recorder, FsError> {
        fsx::create_dir_all(dir)?;
        let wire_path = dir.join("wire.jsonl");
        let wire = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&wire_path)
            .map_err(|source| FsError {
                action: "open",
                path: wire_path.clone(),
                source,
            })?;
        Ok(Recorder {
            wire_path,
            wire: Mutex::new(wire),
            config_path: dir.join("server_config.json"),
            configs: Mutex::new(Map::new()),
            events,
            failed: Mutex::new(None),
        })
    }

    pub(super) fn report(&self, e: FsError) {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if failed.is_none() {
            let msg = format!("proxy could not record: {e}");
            tracing::warn!("{msg}");
            if let Some(tx) = &self.events {
                let _ = tx.send(RunEvent::Warning(msg.clone()));
            }
            *failed = Some(msg);
        }
    }

    pub(super) fn report_cassette(&self, why: String) {
        let msg = format!("proxy could not write the cassette: {why}");
        tracing::warn!("{msg}");
        if let Some(tx) = &self.events {
            let _ = tx.send(RunEvent::Warning(msg));
        }
    }

    pub(super) fn line(&self, record: &Value) {
        let line = record.to_string();
        let mut f = self.wire.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = fsx::append_line(&mut f, &self.wire_path, &line) {
            self.report(e);
        }
    }

    pub(super) fn job_config(&self, config: Value) {
        let job_type = config
            .get("job_type")
            .and_then(Value::as_str)
            .unwrap_or("training")
            .to_string();
        let mut configs = self.configs.lock().unwrap_or_else(|p| p.into_inner());
        configs.insert(job_type, config);
        let text = match serde_json::to_string_pretty(&*configs) {
            Ok(t) => t,
            Err(_) => return, // a Map of Values always serialises
        };
        if let Err(e) = fsx::write_atomic(&self.config_path, text.as_bytes()) {
            self.report(e);
        }
    }
}
