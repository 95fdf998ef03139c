//! Fused multi-head self-attention for the encoder on a GPU: one kernel reads Q, K and V in
//! place from the fused projection's output and writes the context, with the softmax kept
//! online (flash-style), so neither the `[batch, heads, seq, seq]` scores nor a padding mask
//! is ever stored, and no permuted copies of Q, K and V are made.
//!
//! burn's `attention` without its autotune feature (which the workspace leaves off: autotune
//! picks kernels by timing, so two runs could compute different bits) runs as separate
//! kernels: the permutes, a batched matmul for the scores, the mask, a softmax and a second
//! matmul, each a pass over memory. This kernel is its replacement on the device path
//! when `CIX_FUSED` names it (see [`Fused`](super::layers::Fused)).
//!
//! Layout: `qkv` is `[batch * seq, 3 * heads * head_dim]` row-major (a token's row holds Q, K
//! then V, each head-major), `lengths[b] <= seq` are the real token counts (keys past a
//! sequence's length are never read), and the output is `[batch * seq, heads * head_dim]`;
//! rows past a sequence's length are zero (the host kernel's choice: they are padding, which
//! pooling ignores and later layers treat row by row). Scores and sums are f32 whatever the
//! storage type.

use cubecl::prelude::*;

use super::F32;

/// Queries per cube, one per unit.
pub const ATTN_QUERIES: usize = 64;
/// Keys staged in shared memory at a time.
pub const ATTN_KEYS: usize = 32;
/// Largest head dimension the kernel takes (its per-unit accumulators are registers).
pub const ATTN_MAX_HEAD_DIM: usize = 128;

/// One cube per (block of [`ATTN_QUERIES`] queries, head, sequence). Each unit holds its query
/// (pre-scaled by `1/√head_dim`) and the running output in registers; the cube stages
/// [`ATTN_KEYS`] keys and values of its head in shared memory, then each unit folds them into
/// its running maximum, sum and output (online softmax). The tile loop runs over `seq` (a
/// uniform bound: barriers sit in uniform control flow, as WGSL requires); keys and queries
/// past the sequence's length are skipped inside it.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attention_kernel<F: Float>(
    qkv: &[F],
    lengths: &[u32],
    out: &mut [F],
    seq: u32,
    #[comptime] heads: usize,
    #[comptime] dh: usize,
    #[comptime] queries: usize,
    #[comptime] keys: usize,
    #[comptime] loads: usize,
    #[define(F)] _dtype: ElemType,
) {
    let b = CUBE_POS_Z as usize;
    let head = CUBE_POS_Y as usize;
    let u = UNIT_POS_X as usize;
    let qi = CUBE_POS_X as usize * queries + u;
    let seq = seq as usize;
    let len = lengths[b] as usize;
    let hidden = heads * dh;
    let row = 3 * hidden;
    let mut sk = Shared::<[f32]>::new_slice(keys * dh);
    let mut sv = Shared::<[f32]>::new_slice(keys * dh);
    let mut q = Array::<f32>::new(dh);
    let mut acc = Array::<f32>::new(dh);
    let scale = 1.0f32 / f32::cast_from(dh as u32).sqrt();
    let active = qi < len;
    #[unroll]
    for d in 0..dh {
        acc[d] = 0.0f32;
        q[d] = 0.0f32;
    }
    if active {
        #[unroll]
        for d in 0..dh {
            q[d] = f32::cast_from(qkv[(b * seq + qi) * row + head * dh + d]) * scale;
        }
    }
    let mut m = f32::new(-3.4e38f32); // WGSL has no infinity literal
    let mut l = 0.0f32;
    #[allow(clippy::manual_div_ceil)] // a runtime value in the kernel: no `div_ceil` there
    let tiles = (seq + keys - 1) / keys;
    for t in 0..tiles {
        let k0 = t * keys;
        sync_cube(); // the previous tile's readers are done
        for i in 0..loads {
            let p = i * queries + u;
            if p < keys * dh {
                let key = k0 + p / dh;
                let d = p % dh;
                let mut kv = 0.0f32;
                let mut vv = 0.0f32;
                if key < len {
                    let at = (b * seq + key) * row + head * dh + d;
                    kv = f32::cast_from(qkv[at + hidden]);
                    vv = f32::cast_from(qkv[at + 2 * hidden]);
                }
                sk[p] = kv;
                sv[p] = vv;
            }
        }
        sync_cube();
        if active {
            for j in 0..keys {
                if k0 + j < len {
                    let mut s = 0.0f32;
                    #[unroll]
                    for d in 0..dh {
                        s += q[d] * sk[j * dh + d];
                    }
                    if s > m {
                        let c = (m - s).exp();
                        l *= c;
                        #[unroll]
                        for d in 0..dh {
                            acc[d] *= c;
                        }
                        m = s;
                    }
                    let p = (s - m).exp();
                    l += p;
                    #[unroll]
                    for d in 0..dh {
                        acc[d] += p * sv[j * dh + d];
                    }
                }
            }
        }
    }
    if qi < seq {
        let mut inv = 0.0f32;
        if l > 0.0f32 {
            inv = 1.0f32 / l;
        }
        #[unroll]
        for d in 0..dh {
            out[(b * seq + qi) * hidden + head * dh + d] = F::cast_from(acc[d] * inv);
        }
    }
}

/// Why the fused kernel cannot take a shape (the caller then uses burn's attention).
fn unsupported(lengths: &[usize], seq: usize, heads: usize, head_dim: usize) -> bool {
    lengths.is_empty()
        || seq == 0
        || heads == 0
        || head_dim == 0
        || head_dim > ATTN_MAX_HEAD_DIM
        || lengths.len() > u16::MAX as usize
        || heads > u16::MAX as usize
        || seq > u32::MAX as usize / 2
        || lengths.iter().any(|&l| l > seq)
}

/// Launches the kernel over device buffers (`qkv` of element type `elem`); returns the
/// `[lengths.len() * seq, heads * head_dim]` output buffer of the same element type.
fn launch_attention(
    client: &cubecl::client::Client,
    qkv: cubecl::server::Handle,
    lengths: &[usize],
    seq: usize,
    heads: usize,
    head_dim: usize,
    elem: ElemType,
) -> cubecl::server::Handle {
    let b = lengths.len();
    let hidden = heads * head_dim;
    let lens: Vec<u32> = lengths.iter().map(|&l| l as u32).collect();
    let lh = client.create_from_slice(u32::as_bytes(&lens));
    let out = client.empty(b * seq * hidden * elem.size());
    attention_kernel::launch(
        client,
        CubeCount::Static(seq.div_ceil(ATTN_QUERIES) as u32, heads as u32, b as u32),
        CubeDim::new_1d(ATTN_QUERIES as u32),
        unsafe { BufferArg::from_raw_parts(qkv, b * seq * 3 * hidden) },
        unsafe { BufferArg::from_raw_parts(lh, b) },
        unsafe { BufferArg::from_raw_parts(out.clone(), b * seq * hidden) },
        seq as u32,
        heads,
        head_dim,
        ATTN_QUERIES,
        ATTN_KEYS,
        (ATTN_KEYS * head_dim).div_ceil(ATTN_QUERIES),
        elem,
    );
    out
}

/// The host kernel's attention ([`crate::cpu::attention`]) on the device of `client`, for
/// f32 values (the test's entry point; the encoder calls [`attention_tensor`]).
pub fn attention(
    client: &cubecl::client::Client,
    qkv: &[f32],
    lengths: &[usize],
    seq: usize,
    heads: usize,
    head_dim: usize,
) -> Vec<f32> {
    assert!(
        !unsupported(lengths, seq, heads, head_dim),
        "lengths within seq, head_dim in 1..={ATTN_MAX_HEAD_DIM}"
    );
    assert_eq!(qkv.len(), lengths.len() * seq * 3 * heads * head_dim);
    let qh = client.create_from_slice(f32::as_bytes(qkv));
    let oh = launch_attention(client, qh, lengths, seq, heads, head_dim, F32);
    let bytes = client.read_one_unchecked(oh);
    f32::from_bytes(&bytes).to_vec()
}

/// The kernel on the encoder's fused projection, a burn tensor on a cubecl device:
/// `qkv` is `[lengths.len() * seq, 3 * heads * head_dim]` (f32, f16 or bf16); the context,
/// `[lengths.len() * seq, heads * head_dim]` of the same type, stays on the device. `None`
/// when the kernel cannot take the tensor (not a contiguous cubecl float
/// tensor of that shape); the caller then runs burn's attention.
pub(crate) fn attention_tensor(
    qkv: &burn::tensor::Tensor<2>,
    lengths: &[usize],
    seq: usize,
    heads: usize,
    head_dim: usize,
) -> Option<burn::tensor::Tensor<2>> {
    use burn::backend::Cube;
    if unsupported(lengths, seq, heads, head_dim) {
        return None;
    }
    let hidden = heads * head_dim;
    if qkv.dims() != [lengths.len() * seq, 3 * hidden] {
        return None;
    }
    let t = qkv.clone().try_into_primitive::<Cube>().ok()?;
    if !t.is_contiguous() {
        return None;
    }
    let elem = super::elem_of(t.dtype)?;
    let client = t.client.clone();
    let out = launch_attention(
        &client,
        t.handle.clone(),
        lengths,
        seq,
        heads,
        head_dim,
        elem,
    );
    Some(super::layers::wrap(&t, [lengths.len() * seq, hidden], out))
}

/// burn's own flash attention with one unit per row (cubek's `FlashUnit`, which burn reaches
/// only through its autotune feature), launched with that fixed strategy so that results do
/// not depend on timing. `q`, `k`, `v` are `[batch, heads, seq, head_dim]` and `mask` the
/// key-padding mask as burn's `attention` takes them; the result is its output. `Ok(None)`
/// when the tensors are not cubecl tensors (burn's flex backend under
/// `with_portable_kernels`); `Err` says why the kernel refused. Either way the caller runs
/// burn's attention. (cubek's tensor-core strategy is not offered: it takes only sequences
/// of a multiple of 4 × its tile, 64 on CUDA, which padded batches rarely are, and it rounds
/// Q, K, V and the probabilities to f16 whatever the precision asked for.)
pub(crate) fn flash_tensor(
    q: &burn::tensor::Tensor<4>,
    k: &burn::tensor::Tensor<4>,
    v: &burn::tensor::Tensor<4>,
    mask: Option<&burn::tensor::Tensor<4, burn::tensor::Bool>>,
) -> Result<Option<burn::tensor::Tensor<4>>, String> {
    use burn::backend::Cube;
    use burn::tensor::ops::AttentionModuleOptions;
    use burn_cubecl::kernel::attention::{attention, AttentionStrategy};
    let prim = |t: &burn::tensor::Tensor<4>| t.clone().try_into_primitive::<Cube>().ok();
    let (Some(qp), Some(kp), Some(vp)) = (prim(q), prim(k), prim(v)) else {
        return Ok(None);
    };
    let mask = match mask {
        Some(m) => match m.clone().try_into_primitive::<Cube>() {
            Ok(m) => Some(m),
            Err(_) => return Ok(None),
        },
        None => None,
    };
    let out = attention(
        qp,
        kp,
        vp,
        mask,
        None,
        AttentionModuleOptions::default(),
        AttentionStrategy::FlashUnit,
    )
    .map_err(|e| format!("{e:?}"))?;
    Ok(Some(burn::tensor::Tensor::from_primitive::<Cube>(out)))
}
