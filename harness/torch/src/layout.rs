//! The engine's placement of its jobs (trainer and sampler on one device, or each on its own:
//! `rlharness_arctic::torch_spec::layout` has the device map and the rules) and what it
//! records of it: each job's device and each weight sync's bytes and seconds, in
//! `backend_layout.json` of the run directory when `rlharness run` asks for it
//! (`--layout-record`).

use std::path::PathBuf;

use serde::Serialize;
use tch::Device;

use rlharness_arctic::torch_spec::layout::{DeviceMap, LayoutRules, RoleDevice};
use rlharness_arctic::wire::api::JobType;

/// Where the engine puts each role, and the layout it was told.
#[derive(Debug, Clone)]
pub struct EngineLayout {
    pub colocate: bool,
    /// The trainer's device (the log_prob job's too).
    pub training: Device,
    pub sampling: Device,
    /// Where to write the record (`backend_layout.json`), if anywhere.
    pub record: Option<PathBuf>,
}

impl EngineLayout {
    /// Both roles on `device`, colocated: the engine as it always was.
    pub fn colocated(device: Device) -> EngineLayout {
        EngineLayout {
            colocate: true,
            training: device,
            sampling: device,
            record: None,
        }
    }

    /// The torch devices of a device map.
    pub fn from_map(colocate: bool, map: DeviceMap) -> EngineLayout {
        EngineLayout {
            colocate,
            training: torch_device(map.training),
            sampling: torch_device(map.sampling),
            record: None,
        }
    }

    pub fn with_record(mut self, path: Option<PathBuf>) -> EngineLayout {
        self.record = path;
        self
    }

    pub fn device_for(&self, job_type: JobType) -> Device {
        match job_type {
            JobType::Sampling => self.sampling,
            JobType::Training | JobType::LogProb => self.training,
        }
    }
}

pub fn torch_device(d: RoleDevice) -> Device {
    match d {
        RoleDevice::Cpu => Device::Cpu,
        RoleDevice::Cuda(i) => Device::Cuda(i),
    }
}

pub fn device_name(d: Device) -> String {
    match d {
        Device::Cuda(i) => format!("cuda:{i}"),
        Device::Mps => "mps".into(),
        Device::Vulkan => "vulkan".into(),
        _ => "cpu".into(),
    }
}

/// One job as placed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobPlacement {
    pub job_id: u64,
    pub job_type: String,
    pub device: String,
}

/// One weight sync as done.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SyncRecord {
    pub source: u64,
    pub targets: Vec<u64>,
    pub from: String,
    pub to: Vec<String>,
    /// Bytes of parameters moved into all targets together.
    pub bytes: u64,
    /// Wall time of the whole sync (snapshot and copies), seconds.
    pub seconds: f64,
}

/// One sleep or wake of a job, and what the layout's rules free for it: the sampler's weights
/// and KV cache, or the trainer's weights and optimizer state, when colocated; nothing when
/// split (each side has its own devices). The torch engine itself keeps its weights resident
/// and holds no KV cache between calls, so it releases nothing either way: the record says
/// which side sleeps and what the real server frees.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SleepRecord {
    pub job_id: u64,
    pub job_type: String,
    /// `true`: it went to sleep; `false`: it woke.
    pub asleep: bool,
    pub frees: Vec<&'static str>,
}

/// What `backend_layout.json` holds: the layout and its rules, each job's device, each sync,
/// each sleep and wake.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutRecord {
    pub colocate: bool,
    pub devices: RoleDevices,
    /// The rules as of the last training job's `cuda_ipc` (`false` before one exists).
    pub rules: LayoutRules,
    pub jobs: Vec<JobPlacement>,
    pub weight_syncs: Vec<SyncRecord>,
    pub sleeps: Vec<SleepRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoleDevices {
    pub training: String,
    pub sampling: String,
}

impl LayoutRecord {
    pub fn new(layout: &EngineLayout) -> LayoutRecord {
        LayoutRecord {
            colocate: layout.colocate,
            devices: RoleDevices {
                training: device_name(layout.training),
                sampling: device_name(layout.sampling),
            },
            rules: LayoutRules::new(layout.colocate, false),
            jobs: Vec::new(),
            weight_syncs: Vec::new(),
            sleeps: Vec::new(),
        }
    }

    /// Write the record (atomically) where asked; a failure is logged, not fatal: the run's
    /// results do not depend on it.
    pub fn write(&self, path: Option<&PathBuf>) {
        let Some(path) = path else { return };
        let text = match serde_json::to_string_pretty(self) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("backend layout record: {e}");
                return;
            }
        };
        if let Err(e) = rlharness_arctic::fsx::write_atomic(path, text.as_bytes()) {
            tracing::warn!("backend layout record {}: {e}", path.display());
        }
    }
}
