//! Hardware naming: the golden key of a device, and the names and ordinals of CUDA devices it
//! is read from. The runner names the device a run computes on (`run.json`'s `device` and
//! `hardware`); the golden store keeps its goldens under that key.

/// The golden key of a device: an override wins; a known accelerator name maps to its model
/// (`NVIDIA H200` -> `h200`, `NVIDIA A100-SXM4-80GB` -> `a100`, `NVIDIA GeForce RTX 4090` ->
/// `rtx4090`), whatever else the string holds (`NVIDIA H200 (cuda:3)` is `h200`); a CUDA
/// device known only by its ordinal (`cuda:0`, no name) is `cuda`, never `cuda-0`; CPUs map to
/// `cpu`. A pure function of the text, so every mapping is tested without a GPU.
pub(crate) fn hardware_key(device: &str, override_key: Option<&str>) -> String {
    if let Some(k) = override_key.map(str::trim).filter(|k| !k.is_empty()) {
        return slug(k);
    }
    let d = device.to_lowercase();
    let tokens: Vec<&str> = d
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    const KNOWN: &[&str] = &[
        "gb200", "b200", "b100", "h200", "h100", "h800", "h20", "gh200", "a100", "a800", "a10g",
        "a10", "a6000", "a5000", "a4000", "l40s", "l40", "l4", "v100", "t4", "p100", "mi300x",
        "mi325x", "mi250x", "mi250", "mi210",
    ];
    for t in &tokens {
        if KNOWN.contains(t) {
            return (*t).to_string();
        }
    }
    if tokens.is_empty() || tokens[0] == "cpu" || d.starts_with("cpu") {
        return "cpu".into();
    }
    // A consumer or workstation card: `rtx 4090` -> `rtx4090`, `gtx 1080 ti` -> `gtx1080ti`.
    if let Some(i) = tokens.iter().position(|t| matches!(*t, "rtx" | "gtx")) {
        let rest: String = tokens[i + 1..]
            .iter()
            .take_while(|t| **t != "cuda")
            .copied()
            .collect();
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            return format!("{}{rest}", tokens[i]);
        }
    }
    // Only an ordinal (`cuda:0`): the model is unknown, and the ordinal is no part of a key.
    if tokens[0] == "cuda"
        && tokens[1..]
            .iter()
            .all(|t| t.chars().all(|c| c.is_ascii_digit()))
    {
        return "cuda".into();
    }
    const BRANDS: &[&str] = &[
        "nvidia", "geforce", "tesla", "quadro", "amd", "instinct", "radeon",
    ];
    let model: Vec<&str> = tokens
        .iter()
        .copied()
        .filter(|t| !BRANDS.contains(t))
        .collect();
    if model.is_empty() {
        return slug(&d);
    }
    slug(&model.join("-"))
}

/// The `-i` argument `nvidia-smi` needs for the process's CUDA device `ordinal`: CUDA numbers
/// the devices listed in `CUDA_VISIBLE_DEVICES` (indices or UUIDs) from 0, so ordinal N is
/// the N-th entry there; without it, the ordinal is the index (with `CUDA_DEVICE_ORDER=
/// PCI_BUS_ID`, or on a host of one GPU model, where the order cannot change the key).
pub(crate) fn nvidia_smi_index(
    ordinal: usize,
    cuda_visible_devices: Option<&str>,
) -> Option<String> {
    match cuda_visible_devices.map(str::trim) {
        None | Some("") => Some(ordinal.to_string()),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .nth(ordinal)
            .map(str::to_string),
    }
}

/// The CUDA ordinal of a device string such as `cuda:2` (`cuda` alone is ordinal 0).
pub(crate) fn cuda_ordinal(device: &str) -> Option<usize> {
    let rest = device.trim().strip_prefix("cuda")?;
    if rest.is_empty() {
        return Some(0);
    }
    rest.strip_prefix(':')?.parse().ok()
}

/// A device string with the GPU's name when it is known only by its CUDA ordinal:
/// `cuda:0` -> `NVIDIA H200 (cuda:0)`, the name read with
/// `nvidia-smi --query-gpu=name --format=csv,noheader -i N` (tch 0.24 has no device-name
/// call). Anything else, or a name that cannot be read, comes back unchanged.
pub(crate) fn name_cuda_device(device: &str) -> String {
    let Some(ordinal) = cuda_ordinal(device) else {
        return device.to_string();
    };
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let Some(index) = nvidia_smi_index(ordinal, visible.as_deref()) else {
        return device.to_string();
    };
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader", "-i", &index])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            match text.lines().map(str::trim).find(|l| !l.is_empty()) {
                Some(name) => format!("{name} ({device})"),
                None => device.to_string(),
            }
        }
        _ => {
            tracing::warn!(
                "cannot read the name of {device} with nvidia-smi; its golden key is `cuda`"
            );
            device.to_string()
        }
    }
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let t = out.trim_matches('-').to_string();
    if t.is_empty() {
        "unknown".into()
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_keys() {
        assert_eq!(hardware_key("cpu", None), "cpu");
        assert_eq!(hardware_key("CPU (x86_64, 16 threads)", None), "cpu");
        assert_eq!(hardware_key("NVIDIA H200", None), "h200");
        assert_eq!(hardware_key("NVIDIA H100 80GB HBM3", None), "h100");
        assert_eq!(hardware_key("NVIDIA A100-SXM4-80GB", None), "a100");
        assert_eq!(hardware_key("NVIDIA GeForce RTX 4090", None), "rtx4090");
        assert_eq!(hardware_key("NVIDIA H200", Some("h200-nvl")), "h200-nvl");
        assert_eq!(hardware_key("cpu", Some("  My Box ")), "my-box");
        assert_eq!(hardware_key("", None), "cpu");
    }

    #[test]
    fn cuda_names_key_by_model_whatever_the_ordinal() {
        for (name, key) in [
            ("NVIDIA H200", "h200"),
            ("NVIDIA H200 (cuda:0)", "h200"),
            ("NVIDIA H200 (cuda:7)", "h200"),
            ("NVIDIA H100 80GB HBM3", "h100"),
            ("NVIDIA H100 PCIe", "h100"),
            ("NVIDIA H100 NVL (cuda:1)", "h100"),
            ("NVIDIA A100-SXM4-80GB", "a100"),
            ("NVIDIA A100-PCIE-40GB (cuda:3)", "a100"),
            ("NVIDIA GeForce RTX 4090", "rtx4090"),
            ("NVIDIA GeForce RTX 4090 (cuda:1)", "rtx4090"),
            ("NVIDIA GeForce GTX 1080 Ti", "gtx1080ti"),
            ("NVIDIA RTX A6000", "a6000"),
            ("NVIDIA L40S", "l40s"),
            ("NVIDIA L4", "l4"),
            ("Tesla V100-SXM2-16GB", "v100"),
            ("Tesla T4", "t4"),
            ("NVIDIA GH200 480GB", "gh200"),
            ("NVIDIA B200", "b200"),
            ("AMD Instinct MI300X", "mi300x"),
            ("NVIDIA Graphics Device", "graphics-device"),
            // Known only by its ordinal: never `cuda-0`, whatever the ordinal.
            ("cuda:0", "cuda"),
            ("cuda:5", "cuda"),
            ("cuda", "cuda"),
        ] {
            assert_eq!(hardware_key(name, None), key, "{name}");
        }
    }

    /// On a host with an NVIDIA GPU (`cargo test -- --ignored`): ordinal 0 is named through
    /// nvidia-smi and keyed by its model, never by its ordinal.
    #[test]
    #[ignore = "needs an NVIDIA GPU and nvidia-smi: the GPU lane, bash ci/gpu-tests.sh"]
    fn a_real_cuda_device_is_named_and_keyed_by_its_model() {
        let named = name_cuda_device("cuda:0");
        assert!(named.ends_with(" (cuda:0)"), "{named}");
        let key = hardware_key(&named, None);
        assert!(!key.contains("cuda"), "{named} -> {key}");
        println!("{named} -> {key}");
    }

    #[test]
    fn cuda_ordinals_and_visible_devices() {
        assert_eq!(cuda_ordinal("cuda:0"), Some(0));
        assert_eq!(cuda_ordinal("cuda:3"), Some(3));
        assert_eq!(cuda_ordinal("cuda"), Some(0));
        assert_eq!(cuda_ordinal("cpu"), None);
        assert_eq!(cuda_ordinal("cudax"), None);
        assert_eq!(nvidia_smi_index(0, None).as_deref(), Some("0"));
        assert_eq!(nvidia_smi_index(2, Some("")).as_deref(), Some("2"));
        assert_eq!(nvidia_smi_index(0, Some("3,5")).as_deref(), Some("3"));
        assert_eq!(nvidia_smi_index(1, Some("3, 5")).as_deref(), Some("5"));
        assert_eq!(
            nvidia_smi_index(0, Some("GPU-8f3e,GPU-1a2b")).as_deref(),
            Some("GPU-8f3e")
        );
        assert_eq!(nvidia_smi_index(2, Some("3,5")), None);
        // Not a CUDA device: no query, unchanged.
        assert_eq!(name_cuda_device("cpu"), "cpu");
    }
}
