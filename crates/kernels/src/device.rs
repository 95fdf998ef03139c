//! Compute-device choice: the one place that maps a [`DeviceChoice`] to a burn [`Device`].

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use burn::tensor::{Device, Tensor, TensorData};

use crate::ModelError;

/// Which compute device to run the encoder on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// CUDA if compiled in and working, else wgpu if compiled in and working, else CPU.
    #[default]
    Auto,
    /// Pure-Rust CPU backend (burn flex).
    Cpu,
    /// wgpu (Vulkan/Metal/DX12/WebGPU); needs the `wgpu` cargo feature.
    Wgpu,
    /// CUDA; needs the `cuda` cargo feature.
    Cuda,
}

impl FromStr for DeviceChoice {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "wgpu" => Ok(Self::Wgpu),
            "cuda" => Ok(Self::Cuda),
            _ => Err(ModelError::UnknownDevice(s.to_string())),
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Cpu => "cpu",
            Self::Wgpu => "wgpu",
            Self::Cuda => "cuda",
        })
    }
}

/// Float precision the encoder computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f16 on a GPU that supports it and passes the parity check against f32 at load time,
    /// else f32. Always f32 on the CPU.
    #[default]
    Auto,
    /// Single precision everywhere.
    F32,
    /// IEEE half precision (GPU only).
    F16,
    /// bfloat16 (GPU only).
    Bf16,
}

impl Precision {
    /// The burn float type, for an explicit precision (`Auto` has none).
    pub(crate) fn dtype(self) -> Option<burn::tensor::DType> {
        use burn::tensor::DType;
        match self {
            Self::Auto => None,
            Self::F32 => Some(DType::F32),
            Self::F16 => Some(DType::F16),
            Self::Bf16 => Some(DType::BF16),
        }
    }
}

impl FromStr for Precision {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "f32" | "fp32" => Ok(Self::F32),
            "f16" | "fp16" => Ok(Self::F16),
            "bf16" => Ok(Self::Bf16),
            _ => Err(ModelError::UnknownPrecision(s.to_string())),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        })
    }
}

/// A resolved device plus a human-readable description of what was chosen and why.
pub(crate) struct SelectedDevice {
    pub device: Device,
    pub description: String,
    /// Device memory is host memory, so host-side fused kernels can run in place.
    pub host_memory: bool,
}

/// Resolves a [`DeviceChoice`] to a working burn device. This is the only function that
/// decides on a backend.
pub(crate) fn select_device(choice: DeviceChoice) -> Result<SelectedDevice, ModelError> {
    let cpu = || SelectedDevice {
        device: Device::flex(),
        description: "cpu (burn flex)".to_string(),
        host_memory: true,
    };
    match choice {
        DeviceChoice::Cpu => Ok(cpu()),
        DeviceChoice::Cuda => cuda_device().map_err(ModelError::UnsupportedDevice),
        DeviceChoice::Wgpu => wgpu_device().map_err(ModelError::UnsupportedDevice),
        DeviceChoice::Auto => {
            if !cfg!(any(feature = "cuda", feature = "wgpu")) {
                let mut sel = cpu();
                sel.description
                    .push_str("; auto: built without GPU features (cuda, wgpu)");
                return Ok(sel);
            }
            let mut reasons = Vec::new();
            if cfg!(feature = "cuda") {
                match cuda_device() {
                    Ok(mut sel) => {
                        sel.description.push_str("; auto: CUDA works");
                        return Ok(sel);
                    }
                    Err(e) => reasons.push(e),
                }
            }
            if cfg!(feature = "wgpu") {
                match wgpu_device() {
                    Ok(mut sel) => {
                        sel.description.push_str("; auto: ");
                        if !reasons.is_empty() {
                            sel.description.push_str(&reasons.join("; "));
                            sel.description.push_str("; ");
                        }
                        sel.description.push_str("wgpu works");
                        return Ok(sel);
                    }
                    Err(e) => reasons.push(e),
                }
            }
            let mut sel = cpu();
            sel.description.push_str("; auto: ");
            sel.description.push_str(&reasons.join("; "));
            Ok(sel)
        }
    }
}

/// Where the GPU kernel cache lives, or that it is off: the compiled kernels (CUDA's PTX from
/// NVRTC) and the autotune results of every earlier process, so that a new process does not
/// pay seconds of compilation before its first batch (issue 18).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(dead_code))]
pub(crate) enum GpuCache {
    Dir(PathBuf),
    /// `CIX_GPU_CACHE=off`: every process compiles and tunes from scratch.
    Off,
}

/// The cache `var` (an environment lookup) asks for: `CIX_GPU_CACHE` (a directory, or `off`),
/// else `$XDG_CACHE_HOME/cix/gpu` (an absolute path only, as XDG says), else
/// `$HOME/.cache/cix/gpu` (absolute only), else `cix-gpu` in the temporary directory. Never a directory
/// found from the working directory: cubecl's own default is the `target/` of the nearest Cargo
/// workspace above it, which for a user's checkout is a directory we were not given.
#[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(dead_code))]
pub(crate) fn gpu_cache_choice(var: impl Fn(&str) -> Option<OsString>) -> GpuCache {
    let set = |k: &str| var(k).filter(|v| !v.is_empty());
    if let Some(v) = set("CIX_GPU_CACHE") {
        return match v.to_str().map(str::to_ascii_lowercase).as_deref() {
            Some("off" | "0" | "false" | "none") => GpuCache::Off,
            _ => GpuCache::Dir(PathBuf::from(v)),
        };
    }
    let xdg = set("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let home = || {
        set("HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|h| h.join(".cache"))
    };
    match xdg.or_else(home) {
        Some(base) => GpuCache::Dir(base.join("cix").join("gpu")),
        None => GpuCache::Dir(std::env::temp_dir().join("cix-gpu")),
    }
}

/// Configures cubecl (once per process, before the first GPU device): compiled kernels persist
/// in [`gpu_cache_choice`]'s directory (on CUDA, NVRTC's PTX; this build's wgpu compiles WGSL,
/// which cubecl does not cache, and burn's autotune is not compiled in); `CUBECL_*` variables
/// still override, and a `cubecl.toml` or `burn.toml` found from the working directory is not
/// read. Returns what the device description says about it. cubecl reads a directory it
/// cannot write as a cache that keeps nothing, so an unusable directory costs compilation, not
/// the run.
#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) fn configure_gpu_cache() -> &'static str {
    static SAID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SAID.get_or_init(|| {
        use cubecl::config::{cache::CacheConfig, CubeClRuntimeConfig, RuntimeConfig};
        let mut config = CubeClRuntimeConfig::default();
        let (root, said) = match gpu_cache_choice(|k| std::env::var_os(k)) {
            GpuCache::Dir(dir) => {
                config.compilation.cache = true;
                let said = match std::fs::create_dir_all(&dir) {
                    Ok(()) => format!("kernel cache {}", dir.display()),
                    Err(e) => format!(
                        "kernel cache {} unusable ({e}): kernels compile in every process",
                        dir.display()
                    ),
                };
                (dir, said)
            }
            GpuCache::Off => {
                config.compilation.cache = false;
                config.autotune.disable_cache = true;
                config.throughput.disable_cache = true;
                let said = "kernel cache off (CIX_GPU_CACHE=off)".to_string();
                (std::env::temp_dir().join("cix-gpu-off"), said)
            }
        };
        // cubecl's build records (a session per process that compiled something, kept without
        // limit) are not a cache: off, so the directory holds only what a later process reuses.
        config.environment.records.level = cubecl::records::RecordLevel::Off;
        config.environment.path = CacheConfig::Directory(root);
        if CubeClRuntimeConfig::try_set(config.override_from_env()) {
            said
        } else {
            "kernel cache as cubecl was configured before the encoder".to_string()
        }
    })
}

#[cfg(feature = "cuda")]
fn cuda_device() -> Result<SelectedDevice, String> {
    // SAFETY: each only tries to dlopen the candidate library names and drops what it opened.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(
            "the NVIDIA driver library libcuda.so was not found (no driver installed, \
             or its directory is not on LD_LIBRARY_PATH)"
                .to_string(),
        );
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(
            "NVRTC (libnvrtc.so, which compiles the CUDA kernels) was not found: \
             install the CUDA toolkit or the nvidia-cuda-nvrtc wheel and put its lib \
             directory on LD_LIBRARY_PATH"
                .to_string(),
        );
    }
    let cache = configure_gpu_cache();
    let device = Device::cuda(0);
    probe(&device).map_err(|e| format!("CUDA device 0 unusable ({e})"))?;
    Ok(SelectedDevice {
        device,
        description: format!("cuda:0 (burn cuda; {cache})"),
        host_memory: false,
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda_device() -> Result<SelectedDevice, String> {
    Err("cuda requested but this binary was built without the `cuda` feature; rebuild with --features cuda".to_string())
}

#[cfg(feature = "wgpu")]
fn wgpu_device() -> Result<SelectedDevice, String> {
    let cache = configure_gpu_cache();
    let device = Device::wgpu(burn::tensor::DeviceKind::DefaultDevice);
    probe(&device).map_err(|e| format!("wgpu default adapter unusable ({e})"))?;
    Ok(SelectedDevice {
        device,
        description: format!("wgpu default adapter (burn wgpu; {cache})"),
        host_memory: false,
    })
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_device() -> Result<SelectedDevice, String> {
    Err("wgpu requested but this binary was built without the `wgpu` feature; rebuild with --features wgpu".to_string())
}

/// Runs a tiny computation on `device` and reads it back; GPU runtimes report a missing
/// driver or adapter by panicking, so the probe catches unwinds too.
#[allow(dead_code)] // unused in CPU-only builds
fn probe(device: &Device) -> Result<(), String> {
    let device = device.clone();
    let outcome = std::panic::catch_unwind(move || {
        let t = Tensor::<1>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0], [3]), &device);
        let v = (t.clone() * t)
            .sum()
            .try_into_data()
            .map_err(|e| e.to_string())?
            .try_into_vec::<f32>()
            .map_err(|e| format!("{e:?}"))?;
        if v.first().copied() == Some(14.0) {
            Ok(())
        } else {
            Err(format!("probe computed {v:?}, expected [14.0]"))
        }
    });
    match outcome {
        Ok(r) => r,
        Err(panic) => Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "backend panicked during initialisation".to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for (s, c) in [
            ("auto", DeviceChoice::Auto),
            ("cpu", DeviceChoice::Cpu),
            ("wgpu", DeviceChoice::Wgpu),
            ("cuda", DeviceChoice::Cuda),
        ] {
            assert_eq!(s.parse::<DeviceChoice>().unwrap(), c);
            assert_eq!(c.to_string(), s);
        }
        assert_eq!(" CPU ".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cpu);
        assert_eq!(DeviceChoice::default(), DeviceChoice::Auto);
    }

    #[test]
    fn precision_parses_and_displays() {
        for (s, p) in [
            ("auto", Precision::Auto),
            ("f32", Precision::F32),
            ("f16", Precision::F16),
            ("bf16", Precision::Bf16),
        ] {
            assert_eq!(s.parse::<Precision>().unwrap(), p);
            assert_eq!(p.to_string(), s);
        }
        assert_eq!("FP16".parse::<Precision>().unwrap(), Precision::F16);
        let err = "int8".parse::<Precision>().unwrap_err();
        assert!(err.to_string().contains("auto, f32, f16, bf16"), "{err}");
    }

    #[test]
    fn parse_rejects_unknown() {
        let err = "tpu".parse::<DeviceChoice>().unwrap_err();
        assert!(matches!(err, ModelError::UnknownDevice(_)));
        assert!(err.to_string().contains("auto, cpu, wgpu, cuda"));
        assert!("".parse::<DeviceChoice>().is_err());
    }

    #[test]
    fn cpu_always_available() {
        let sel = select_device(DeviceChoice::Cpu).unwrap();
        assert!(sel.description.starts_with("cpu"));
        probe(&sel.device).unwrap();
    }

    #[test]
    fn gpu_cache_directory_is_chosen_from_the_environment_only() {
        fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
            let pairs: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            move |k| {
                pairs
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        }
        let dir = |p: &str| GpuCache::Dir(PathBuf::from(p));
        assert_eq!(
            gpu_cache_choice(env(&[("CIX_GPU_CACHE", "/c"), ("HOME", "/h")])),
            dir("/c")
        );
        for off in ["off", "OFF", "0", "none", "false"] {
            let off_env = env(&[("CIX_GPU_CACHE", off)]);
            assert_eq!(gpu_cache_choice(off_env), GpuCache::Off, "{off}");
        }
        assert_eq!(
            gpu_cache_choice(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            dir("/x/cix/gpu")
        );
        // A relative XDG_CACHE_HOME is invalid by the spec and ignored; empty values are unset.
        assert_eq!(
            gpu_cache_choice(env(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")])),
            dir("/h/.cache/cix/gpu")
        );
        assert_eq!(
            gpu_cache_choice(env(&[("CIX_GPU_CACHE", ""), ("HOME", "/h")])),
            dir("/h/.cache/cix/gpu")
        );
        assert_eq!(
            gpu_cache_choice(env(&[])),
            GpuCache::Dir(std::env::temp_dir().join("cix-gpu"))
        );
    }

    #[cfg(not(any(feature = "cuda", feature = "wgpu")))]
    #[test]
    fn cpu_only_build_auto_is_cpu_and_gpu_is_unsupported() {
        let sel = select_device(DeviceChoice::Auto).unwrap();
        assert!(sel.description.starts_with("cpu"), "{}", sel.description);
        for choice in [DeviceChoice::Wgpu, DeviceChoice::Cuda] {
            let err = select_device(choice).err().unwrap();
            assert!(matches!(err, ModelError::UnsupportedDevice(_)));
            assert!(err
                .to_string()
                .contains(&format!("rebuild with --features {choice}")));
        }
    }
}
