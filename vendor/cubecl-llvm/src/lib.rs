//! Offline stand-in for `cubecl-llvm` 0.11.3 (see README.md): the types `cubecl-cuda` names,
//! with no LLVM behind them. cubecl-cuda compiles kernels through its CUDA C++ backend
//! (NVRTC); a kernel sent to [`PlironCompiler`] fails with an error naming this crate.

pub mod nvptx {
    //! The PTX version cubecl-cuda derives from the driver (cache keys, options).
    pub mod ptx_version;
}

pub mod shared {
    //! Compiler types cubecl-cuda names; see the crate docs.

    pub mod lowered_features {
        //! What the LLVM backend would narrow a device's advertised features to. Nothing is
        //! lowered through LLVM in this build, so there is nothing to narrow.
        use cubecl_core::ir::DeviceProperties;

        /// The GPU target a device's features are narrowed for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum GpuTarget {
            #[cfg(feature = "nvptx")]
            Nvptx,
            #[cfg(feature = "amdgpu")]
            AmdGpu,
        }

        /// No-op: see the module docs. cubecl-cuda calls it only for its LLVM backend.
        pub fn restrict_features(_props: &mut DeviceProperties, _target: GpuTarget) {}
    }

    use crate::target::LlvmTarget;
    use cubecl_core::ir::amd::GfxArch;
    #[cfg(feature = "nvptx")]
    use cubecl_core::ir::nvidia::SmArch;
    use cubecl_core::prelude::KernelDefinition;
    use cubecl_core::Compiler;
    use cubecl_environment::backtrace::BackTrace;
    use cubecl_runtime::{
        compiler::CompilationError, config::compilation::F16Evaluation, kernel::BufferIOAttr,
    };

    /// The LLVM compiler's handle; [`Compiler::compile`] always fails here.
    #[derive(Clone, Debug, Default)]
    pub struct PlironCompiler {
        pub target: LlvmTarget,
    }

    /// The LLVM compiler's options (same fields as the real crate's).
    #[derive(Clone, Debug, Default)]
    pub struct PlironOptions {
        pub cpu_buffer_alignment: Option<u32>,
        pub arch: Option<GfxArch>,
        pub f16_evaluation: F16Evaluation,
        #[cfg(feature = "nvptx")]
        pub sm_arch: Option<SmArch>,
        #[cfg(feature = "nvptx")]
        pub ptx_version: Option<crate::nvptx::ptx_version::PtxVersion>,
        pub grid_constants: bool,
    }

    /// A compiled PTX module (never produced here).
    #[derive(Clone, Debug)]
    #[cfg(feature = "nvptx")]
    pub struct NvptxModule {
        /// NUL-terminated PTX assembly.
        pub ptx: Vec<core::ffi::c_char>,
        /// Kernel entry point symbol.
        pub entrypoint: String,
        /// IR for logging and cache keys.
        pub ir: String,
        /// Shared memory required per launch, in bytes.
        pub shared_memory_size: usize,
        /// Buffer access modes in binding order.
        pub io: Vec<BufferIOAttr>,
    }

    /// A compiled kernel artifact (never produced here).
    #[derive(Clone, Debug)]
    pub enum PlironArtifact {
        #[cfg(feature = "nvptx")]
        NvptxCode(NvptxModule),
        /// Keeps the enum inhabited-in-type when no target feature is on.
        #[doc(hidden)]
        Unavailable,
    }

    impl core::fmt::Display for PlironArtifact {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            match self {
                #[cfg(feature = "nvptx")]
                PlironArtifact::NvptxCode(module) => f.write_str(&module.ir),
                PlironArtifact::Unavailable => f.write_str("<no LLVM backend in this build>"),
            }
        }
    }

    /// What every compile answers.
    pub const UNAVAILABLE: &str = "the LLVM backend of cubecl is not in this build (the offline \
        cubecl-llvm stand-in in vendor/cubecl-llvm is patched in); cubecl-cuda compiles through \
        its CUDA C++ backend (NVRTC) instead: build with cubecl's `cuda-cpp` feature";

    impl Compiler for PlironCompiler {
        type Representation = PlironArtifact;
        type CompilationOptions = PlironOptions;

        fn buffer_io(repr: &Self::Representation) -> Option<Vec<BufferIOAttr>> {
            match repr {
                #[cfg(feature = "nvptx")]
                PlironArtifact::NvptxCode(module) => Some(module.io.clone()),
                PlironArtifact::Unavailable => None,
            }
        }

        fn compile(
            &mut self,
            _kernel: KernelDefinition,
            _options: &Self::CompilationOptions,
        ) -> Result<Self::Representation, CompilationError> {
            Err(CompilationError::Generic {
                reason: UNAVAILABLE.to_string(),
                backtrace: BackTrace::capture(),
            })
        }

        fn extension(&self) -> &'static str {
            if self.target.is_gpu() {
                "ll"
            } else {
                "plir"
            }
        }

        fn lang_tag(&self) -> &'static str {
            if self.target.is_gpu() {
                "llvm"
            } else {
                "mlir"
            }
        }
    }
}

pub mod target {
    //! LLVM compilation targets.

    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub enum LlvmTarget {
        #[default]
        Cpu,
        #[cfg(feature = "amdgpu")]
        AmdGpu,
        #[cfg(feature = "nvptx")]
        Nvptx,
    }

    impl LlvmTarget {
        /// Whether the target provides a hardware launch grid.
        pub fn is_gpu(self) -> bool {
            !matches!(self, LlvmTarget::Cpu)
        }
    }
}

#[cfg(feature = "nvptx")]
pub use shared::NvptxModule;
pub use shared::{PlironArtifact, PlironCompiler, PlironOptions};
pub use target::LlvmTarget;
