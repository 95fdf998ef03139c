//! The CPU features the format's kernels dispatch on, each detected once per process: the
//! BM25 factors ([`avx2`]), the mapped IVF's dot products and routing ([`avx2_fma`]) and the
//! one-bit scan ([`avx512bw`], then [`avx2_fma`]). Every kernel has a portable version that
//! gives the same results; these only choose which one runs.

/// Whether the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
pub fn avx2() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2"))
}

/// Whether the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
pub fn avx2_fma() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// Whether the CPU has AVX-512F and AVX-512BW, and the environment does not turn them off:
/// `CIX_NO_AVX512=1` makes the one-bit scan run its AVX2 kernel, for A/B measurements and
/// for machines where 512-bit instructions lower the clock.
#[cfg(target_arch = "x86_64")]
pub fn avx512bw() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::env::var_os("CIX_NO_AVX512").is_none_or(|v| v.is_empty() || v == "0")
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
    })
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    /// Each answer implies the features it stands for.
    #[test]
    fn features_imply_their_parts() {
        assert_eq!(super::avx2(), is_x86_feature_detected!("avx2"));
        if super::avx2_fma() {
            assert!(super::avx2() && is_x86_feature_detected!("fma"));
        }
        if super::avx512bw() {
            assert!(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw"));
        }
    }
}
