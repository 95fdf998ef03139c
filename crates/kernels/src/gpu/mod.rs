//! cubecl kernels for the GPU backends (built with the `wgpu` or `cuda` feature), each with a
//! CPU reference and a test comparing the two (run on wgpu over Mesa's lavapipe in CI).
//!
//! - [`pool_normalize`]: fused masked mean pooling + L2 normalisation over the last hidden
//!   state, one cube per row: each unit pools a strided subset of the hidden dimensions and
//!   keeps its sum of squares in shared memory; one unit reduces them into the norm, and every
//!   unit scales its own outputs. One launch, one read back.

use cubecl::prelude::*;

/// Units per cube (rows are pooled by this many units; hidden sizes up to 4096 are fine).
pub const POOL_UNITS: usize = 128;

#[cube(launch)]
fn pool_normalize_kernel(
    x: &[f32],
    mask: &[f32],
    out: &mut [f32],
    #[comptime] tokens: usize,
    #[comptime] hidden: usize,
    #[comptime] units: usize,
    #[comptime] steps: usize,
) {
    let r = CUBE_POS_X as usize;
    let u = UNIT_POS_X as usize;
    let mut partial = Shared::<[f32]>::new_slice(units);
    let mut norm = Shared::<[f32]>::new_slice(1usize);
    let mut count = 0.0f32;
    for t in 0..tokens {
        count += mask[r * tokens + t];
    }
    let mut denom = 1.0f32;
    if count > 1.0f32 {
        denom = count;
    }
    let mut ss = 0.0f32;
    for k in 0..steps {
        let h = u + k * units;
        if h < hidden {
            let mut acc = 0.0f32;
            for t in 0..tokens {
                acc += x[(r * tokens + t) * hidden + h] * mask[r * tokens + t];
            }
            let v = acc / denom;
            out[r * hidden + h] = v;
            ss += v * v;
        }
    }
    partial[u] = ss;
    sync_cube();
    if u == 0 {
        let mut s = 0.0f32;
        for i in 0..units {
            s += partial[i];
        }
        let mut n = s.sqrt();
        if n < 1e-12f32 {
            n = 1e-12f32;
        }
        norm[0] = n;
    }
    sync_cube();
    let n = norm[0];
    for k in 0..steps {
        let h = u + k * units;
        if h < hidden {
            out[r * hidden + h] /= n;
        }
    }
}

/// [`crate::pool::pool_normalize_cpu`] on the device of `client` (e.g.
/// `cubecl::Device::default().client()`).
pub fn pool_normalize(
    client: &cubecl::client::Client,
    x: &[f32],
    mask: &[f32],
    rows: usize,
    tokens: usize,
    hidden: usize,
) -> Vec<f32> {
    assert_eq!(
        x.len(),
        rows * tokens * hidden,
        "x is rows × tokens × hidden"
    );
    assert_eq!(mask.len(), rows * tokens, "mask is rows × tokens");
    if rows == 0 || hidden == 0 {
        return Vec::new();
    }
    let xh = client.create_from_slice(f32::as_bytes(x));
    let mh = client.create_from_slice(f32::as_bytes(mask));
    let oh = client.empty(rows * hidden * core::mem::size_of::<f32>());
    pool_normalize_kernel::launch(
        client,
        CubeCount::Static(rows as u32, 1, 1),
        CubeDim::new_1d(POOL_UNITS as u32),
        unsafe { BufferArg::from_raw_parts(xh, x.len()) },
        unsafe { BufferArg::from_raw_parts(mh, mask.len()) },
        unsafe { BufferArg::from_raw_parts(oh.clone(), rows * hidden) },
        tokens,
        hidden,
        POOL_UNITS,
        hidden.div_ceil(POOL_UNITS),
    );
    let bytes = client.read_one_unchecked(oh);
    f32::from_bytes(&bytes).to_vec()
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use super::*;

    /// The kernel equals the CPU reference on wgpu (lavapipe in CI): random hidden states,
    /// ragged masks, a row without tokens, hidden sizes below, at and above the unit count.
    #[test]
    fn pool_normalize_matches_cpu_reference() {
        let client = match std::panic::catch_unwind(|| cubecl::Device::default().client()) {
            Ok(c) => c,
            Err(_) if std::env::var("CIX_REQUIRE_WGPU").as_deref() != Ok("1") => {
                eprintln!("SKIPPED: no wgpu adapter");
                return;
            }
            Err(_) => panic!("no wgpu adapter (CIX_REQUIRE_WGPU=1)"),
        };
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
        };
        for (rows, tokens, hidden) in [(3, 5, 7), (4, 17, 128), (5, 33, 384), (2, 9, 300)] {
            let x: Vec<f32> = (0..rows * tokens * hidden).map(|_| rnd()).collect();
            let mut mask = vec![0f32; rows * tokens];
            for r in 0..rows {
                let len = if r == 1 { 0 } else { 1 + r * 3 % tokens };
                for t in 0..len.min(tokens) {
                    mask[r * tokens + t] = 1.0;
                }
            }
            let want = crate::pool::pool_normalize_cpu(&x, &mask, rows, tokens, hidden);
            let got = pool_normalize(&client, &x, &mask, rows, tokens, hidden);
            assert_eq!(got.len(), want.len());
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < 1e-5,
                "{rows}×{tokens}×{hidden}: max abs diff {worst}"
            );
        }
    }
}
