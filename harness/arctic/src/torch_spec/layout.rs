//! Where the torch backend puts its trainer and its sampler, and the rules that follow from the
//! layout knobs, as pure functions (no libtorch): `rlharness-torch` applies them, and they are
//! tested on any build.
//!
//! Arctic RL either colocates its DeepSpeed trainer and its vLLM sampler on the same GPUs
//! (`remote_backend.colocate: true`: the sides take turns, sleeping around rollouts, and a
//! weight sync may hand CUDA-IPC handles over) or splits them (`colocate: false`: the trainer
//! on the first `training_gpus` devices, the sampler on the next `sampling_gpus`; nothing is
//! put to sleep to make room for the other side, and a weight sync copies the parameters from
//! one device to another, so `weight_sync.cuda_ipc` has no effect). The torch backend holds
//! one model per role, on the first device of the role's share.

use std::fmt;

use super::TorchDevice;

/// The device one role's model lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleDevice {
    Cpu,
    /// A CUDA ordinal among the visible devices.
    Cuda(usize),
}

impl fmt::Display for RoleDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoleDevice::Cpu => f.write_str("cpu"),
            RoleDevice::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// Each role's device. The log_prob (reference) job lives with the trainer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMap {
    pub training: RoleDevice,
    pub sampling: RoleDevice,
}

/// The layout knobs as the backend receives them: `colocate` and the GPU counts as start-up
/// flags (`--colocate`, `--training-gpus`, `--sampling-gpus`), `cuda_ipc` in the training
/// job's JobConfig.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutKnobs {
    pub colocate: bool,
    pub training_gpus: u32,
    pub sampling_gpus: u32,
}

impl Default for LayoutKnobs {
    /// `backends/arctic.yaml`'s defaults: colocated, one GPU each.
    fn default() -> Self {
        LayoutKnobs {
            colocate: true,
            training_gpus: 1,
            sampling_gpus: 1,
        }
    }
}

/// Why the layout knobs do not fit this host.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error(
        "colocated layout (remote_backend.colocate: true) with {knob} needs {need} CUDA \
         device(s), this host shows {visible}"
    )]
    Colocated {
        knob: String,
        need: usize,
        visible: usize,
    },
    #[error(
        "split layout (remote_backend.colocate: false) needs remote_backend.{0} of at least 1, \
         got 0"
    )]
    NoGpus(&'static str),
    #[error(
        "split layout (remote_backend.colocate: false) with remote_backend.training_gpus: {t} \
         and remote_backend.sampling_gpus: {s} needs {} CUDA devices ({t} + {s}), this host \
         shows {visible}",
        t + s
    )]
    Split { t: usize, s: usize, visible: usize },
}

/// Each role's device for a backend on `device`, under the layout knobs, on a host with
/// `visible` devices of that kind.
///
/// - CPU: both roles on `cpu`, whatever the layout (the rules still follow the knobs).
/// - CUDA, colocated: both roles on `cuda:0`; the host needs `max(training_gpus,
///   sampling_gpus)` devices (at least 1).
/// - CUDA, split: the trainer on `cuda:0` (its share is `0..training_gpus`), the sampler on
///   `cuda:training_gpus` (its share the next `sampling_gpus`); each count must be at least 1
///   and the host needs their sum.
pub fn device_map(
    device: TorchDevice,
    knobs: LayoutKnobs,
    visible: usize,
) -> Result<DeviceMap, LayoutError> {
    let LayoutKnobs {
        colocate,
        training_gpus,
        sampling_gpus,
    } = knobs;
    if device == TorchDevice::Cpu {
        return Ok(DeviceMap {
            training: RoleDevice::Cpu,
            sampling: RoleDevice::Cpu,
        });
    }
    let (t, s) = (training_gpus as usize, sampling_gpus as usize);
    if colocate {
        let need = t.max(s).max(1);
        if visible < need {
            let knob = if t >= s {
                format!("remote_backend.training_gpus: {t}")
            } else {
                format!("remote_backend.sampling_gpus: {s}")
            };
            return Err(LayoutError::Colocated {
                knob,
                need,
                visible,
            });
        }
        return Ok(DeviceMap {
            training: RoleDevice::Cuda(0),
            sampling: RoleDevice::Cuda(0),
        });
    }
    for (knob, n) in [("training_gpus", t), ("sampling_gpus", s)] {
        if n == 0 {
            return Err(LayoutError::NoGpus(knob));
        }
    }
    if visible < t + s {
        return Err(LayoutError::Split { t, s, visible });
    }
    Ok(DeviceMap {
        training: RoleDevice::Cuda(0),
        sampling: RoleDevice::Cuda(t),
    })
}

/// How a weight sync moves the trainer's parameters into the sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncPath {
    /// Colocated with `cuda_ipc: true`: the sampler is handed the trainer's memory (the torch
    /// backend still copies within the device, so the sampler keeps weights of its own).
    CudaIpc,
    /// Colocated without CUDA IPC: a copy within the shared device.
    SameDevice,
    /// Split: a copy from the trainer's device to the sampler's.
    DeviceToDevice,
}

/// What the layout knobs make the backend do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LayoutRules {
    pub colocate: bool,
    /// `weight_sync.cuda_ipc` as the training job asked.
    pub cuda_ipc_asked: bool,
    /// Whether it takes effect (only when colocated).
    pub cuda_ipc_honoured: bool,
    pub sync: SyncPath,
    /// Whether a weight sync copies parameters from one device to another.
    pub sync_copies_across_devices: bool,
    /// What `/sleep-inference` frees of the sampler: its weights and KV cache when colocated
    /// (the trainer needs the memory), nothing when split (the sampler has its own devices).
    pub sampler_sleep_frees: Vec<&'static str>,
    /// What `/sleep-training` frees of the trainer: its weights and optimizer state when
    /// colocated, nothing when split.
    pub trainer_sleep_frees: Vec<&'static str>,
    /// Said when a knob is received but has no effect in this layout.
    pub notes: Vec<String>,
}

impl LayoutRules {
    pub fn new(colocate: bool, cuda_ipc: bool) -> LayoutRules {
        let cuda_ipc_honoured = colocate && cuda_ipc;
        let sync = match (colocate, cuda_ipc) {
            (true, true) => SyncPath::CudaIpc,
            (true, false) => SyncPath::SameDevice,
            (false, _) => SyncPath::DeviceToDevice,
        };
        let frees = |what: &[&'static str]| if colocate { what.to_vec() } else { Vec::new() };
        let mut notes = Vec::new();
        if cuda_ipc && !colocate {
            notes.push(
                "remote_backend.weight_sync.cuda_ipc: true has no effect with colocate: false \
                 (the sync copies across devices)"
                    .to_string(),
            );
        }
        LayoutRules {
            colocate,
            cuda_ipc_asked: cuda_ipc,
            cuda_ipc_honoured,
            sync,
            sync_copies_across_devices: !colocate,
            sampler_sleep_frees: frees(&["weights", "kv_cache"]),
            trainer_sleep_frees: frees(&["weights", "optimizer_state"]),
            notes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(colocate: bool, t: u32, s: u32) -> LayoutKnobs {
        LayoutKnobs {
            colocate,
            training_gpus: t,
            sampling_gpus: s,
        }
    }

    #[test]
    fn cpu_puts_both_roles_on_the_cpu_whatever_the_layout() {
        for colocate in [true, false] {
            for (t, s) in [(0, 0), (1, 1), (2, 3)] {
                let m = device_map(TorchDevice::Cpu, knobs(colocate, t, s), 0).unwrap();
                assert_eq!(m.training, RoleDevice::Cpu);
                assert_eq!(m.sampling, RoleDevice::Cpu);
            }
        }
    }

    #[test]
    fn colocated_cuda_shares_device_zero() {
        let m = device_map(TorchDevice::Cuda, knobs(true, 1, 1), 1).unwrap();
        assert_eq!(
            (m.training, m.sampling),
            (RoleDevice::Cuda(0), RoleDevice::Cuda(0))
        );
        assert_eq!(m.sampling.to_string(), "cuda:0");
        let m = device_map(TorchDevice::Cuda, knobs(true, 2, 2), 8).unwrap();
        assert_eq!(
            (m.training, m.sampling),
            (RoleDevice::Cuda(0), RoleDevice::Cuda(0))
        );
        // 0 GPUs for a role still needs one device for the other.
        assert!(device_map(TorchDevice::Cuda, knobs(true, 0, 0), 1).is_ok());
    }

    #[test]
    fn split_cuda_puts_the_sampler_after_the_trainers_share() {
        let m = device_map(TorchDevice::Cuda, knobs(false, 1, 1), 2).unwrap();
        assert_eq!(
            (m.training, m.sampling),
            (RoleDevice::Cuda(0), RoleDevice::Cuda(1))
        );
        assert_eq!(m.training.to_string(), "cuda:0");
        assert_eq!(m.sampling.to_string(), "cuda:1");
        let m = device_map(TorchDevice::Cuda, knobs(false, 2, 1), 4).unwrap();
        assert_eq!(
            (m.training, m.sampling),
            (RoleDevice::Cuda(0), RoleDevice::Cuda(2))
        );
    }

    #[test]
    fn too_few_devices_name_the_knobs_and_the_counts() {
        let e = device_map(TorchDevice::Cuda, knobs(false, 1, 1), 1)
            .unwrap_err()
            .to_string();
        for part in [
            "remote_backend.colocate: false",
            "remote_backend.training_gpus: 1",
            "remote_backend.sampling_gpus: 1",
            "needs 2 CUDA devices",
            "shows 1",
        ] {
            assert!(e.contains(part), "{e}");
        }
        let e = device_map(TorchDevice::Cuda, knobs(true, 1, 2), 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("remote_backend.sampling_gpus: 2"), "{e}");
        assert!(e.contains("needs 2") && e.contains("shows 1"), "{e}");
        let e = device_map(TorchDevice::Cuda, knobs(true, 1, 1), 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("remote_backend.training_gpus: 1") && e.contains("shows 0"),
            "{e}"
        );
        let e = device_map(TorchDevice::Cuda, knobs(false, 0, 1), 8)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("remote_backend.training_gpus") && e.contains("got 0"),
            "{e}"
        );
        let e = device_map(TorchDevice::Cuda, knobs(false, 1, 0), 8)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("remote_backend.sampling_gpus") && e.contains("got 0"),
            "{e}"
        );
    }

    #[test]
    fn the_rules_follow_colocate_and_cuda_ipc() {
        let r = LayoutRules::new(true, false);
        assert_eq!(r.sync, SyncPath::SameDevice);
        assert!(!r.sync_copies_across_devices && !r.cuda_ipc_honoured);
        assert_eq!(r.sampler_sleep_frees, ["weights", "kv_cache"]);
        assert_eq!(r.trainer_sleep_frees, ["weights", "optimizer_state"]);
        assert!(r.notes.is_empty());

        let r = LayoutRules::new(true, true);
        assert_eq!(r.sync, SyncPath::CudaIpc);
        assert!(r.cuda_ipc_honoured && r.notes.is_empty());

        for ipc in [false, true] {
            let r = LayoutRules::new(false, ipc);
            assert_eq!(r.sync, SyncPath::DeviceToDevice);
            assert!(r.sync_copies_across_devices && !r.cuda_ipc_honoured);
            assert!(r.sampler_sleep_frees.is_empty() && r.trainer_sleep_frees.is_empty());
            assert_eq!(r.cuda_ipc_asked, ipc);
            assert_eq!(r.notes.len(), usize::from(ipc));
        }
        assert!(LayoutRules::new(false, true).notes[0].contains("no effect"));
    }
}
