//! BERT encoder forward pass (embeddings, post-LN transformer layers, pooling): through burn's
//! ops on a device, through [`crate::host`] for CPU batches, in half precision
//! ([`crate::small`]) for single queries on the CPU.

use burn::tensor::activation::{gelu, gelu_approximate};
use burn::tensor::module::{attention, layer_norm, linear};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, DType, Device, Int, Tensor, TensorData};

use crate::cpu;
use crate::host::{self, HostLayer, HostLinear};
use crate::load::{Activation, BertConfig, Pooling, Weights};
use crate::small;
use crate::ModelError;

/// Affine map `x @ weight + bias` with `weight` stored `[in, out]`.
struct Linear {
    weight: Tensor<2>,
    bias: Tensor<1>,
}

impl Linear {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        linear(x, self.weight.clone(), Some(self.bias.clone()))
    }
}

/// Layer normalisation over the last dimension.
struct LayerNorm {
    gamma: Tensor<1>,
    beta: Tensor<1>,
    eps: f64,
}

impl LayerNorm {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        layer_norm(x, self.gamma.clone(), Some(self.beta.clone()), self.eps)
    }
}

/// One post-LN transformer block. Q, K and V projections are fused into one `[h, 3h]` matmul.
struct EncoderLayer {
    qkv: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    ffn_in: Linear,
    ffn_out: Linear,
    ffn_norm: LayerNorm,
}

/// A loaded BERT encoder with pooling.
pub(crate) struct Bert {
    device: Device,
    cfg: BertConfig,
    word: Tensor<2>,
    /// Position embeddings plus the token-type-0 embedding, `[max_tokens, h]`.
    pos_type: Tensor<2>,
    emb_norm: LayerNorm,
    /// The layers as burn tensors, for a device (and burn's portable ops on the CPU,
    /// [`Bert::disable_host_kernels`]); empty on the host path, which keeps only
    /// `host_layers` (one copy of the weights in memory).
    layers: Vec<EncoderLayer>,
    /// The layers in f32 on the host ([`crate::host`]), on the host path; empty on a device.
    host_layers: Vec<HostLayer>,
    /// Device memory is host memory (flex): run batches through [`crate::host`] and the fused
    /// host kernels in `cpu`.
    host_kernels: bool,
    /// Float type of the weights and activations.
    dtype: DType,
    /// The layers in half precision for single queries ([`Bert::forward_query`]), made on
    /// first use.
    small: std::sync::OnceLock<Result<Vec<SmallLayer>, String>>,
}

/// One encoder layer's weights for [`crate::small`]: half-precision linears, f32 norms.
struct SmallLayer {
    qkv: small::Packed,
    attn_out: small::Packed,
    attn_norm: (Vec<f32>, Vec<f32>),
    ffn_in: small::Packed,
    ffn_out: small::Packed,
    ffn_norm: (Vec<f32>, Vec<f32>),
}

/// An f32 tensor's values on the host (without a copy where its buffer allows).
fn host<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>, ModelError> {
    t.try_into_data()
        .map_err(|e| ModelError::Inference(e.to_string()))?
        .try_into_vec::<f32>()
        .map_err(|e| ModelError::Inference(format!("{e:?}")))
}

/// A host linear's weight (`[in, out]`) and bias, packed in half precision.
fn packed(l: &HostLinear) -> small::Packed {
    small::Packed::new(&l.w, l.i, l.o, l.b.clone())
}

/// Puts weights on the model's device.
struct Uploader<'w> {
    device: &'w Device,
    eps: f64,
    /// Float type the weights are cast to on the device (f32, f16 or bf16).
    dtype: DType,
}

struct Loader<'w, 'a> {
    weights: &'w Weights<'a>,
    up: Uploader<'w>,
}

impl Uploader<'_> {
    fn tensor2(&self, data: Vec<f32>, rows: usize, cols: usize) -> Tensor<2> {
        self.upload(data, [rows, cols])
    }

    fn upload<const D: usize>(&self, data: Vec<f32>, shape: [usize; D]) -> Tensor<D> {
        let t = Tensor::from_data(TensorData::new(data, shape), self.device);
        if self.dtype == DType::F32 {
            t
        } else {
            t.cast(self.dtype)
        }
    }

    /// A host linear's copy on the device.
    fn upload_linear(&self, l: &HostLinear) -> Linear {
        Linear {
            weight: self.tensor2(l.w.clone(), l.i, l.o),
            bias: self.upload(l.b.clone(), [l.o]),
        }
    }

    /// A host layer's copy on the device.
    fn upload_layer(&self, l: &HostLayer) -> EncoderLayer {
        let norm = |(g, b): &(Vec<f32>, Vec<f32>)| LayerNorm {
            gamma: self.upload(g.clone(), [g.len()]),
            beta: self.upload(b.clone(), [b.len()]),
            eps: self.eps,
        };
        EncoderLayer {
            qkv: self.upload_linear(&l.qkv),
            attn_out: self.upload_linear(&l.attn_out),
            attn_norm: norm(&l.attn_norm),
            ffn_in: self.upload_linear(&l.ffn_in),
            ffn_out: self.upload_linear(&l.ffn_out),
            ffn_norm: norm(&l.ffn_norm),
        }
    }
}

impl Loader<'_, '_> {
    fn tensor1(&self, name: &str, len: usize) -> Result<Tensor<1>, ModelError> {
        let v = self.weights.get(name, &[len])?;
        Ok(self.up.upload(v, [len]))
    }

    fn linear(
        &self,
        prefix: &str,
        in_dim: usize,
        out_dim: usize,
    ) -> Result<HostLinear, ModelError> {
        let w = self
            .weights
            .get_linear_t(&format!("{prefix}.weight"), out_dim, in_dim)?;
        Ok(HostLinear {
            w,
            b: self.weights.get(&format!("{prefix}.bias"), &[out_dim])?,
            i: in_dim,
            o: out_dim,
        })
    }

    fn norm_host(&self, prefix: &str, dim: usize) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        Ok((
            self.weights.get(&format!("{prefix}.weight"), &[dim])?,
            self.weights.get(&format!("{prefix}.bias"), &[dim])?,
        ))
    }

    fn layer_norm(&self, prefix: &str, dim: usize) -> Result<LayerNorm, ModelError> {
        Ok(LayerNorm {
            gamma: self.tensor1(&format!("{prefix}.weight"), dim)?,
            beta: self.tensor1(&format!("{prefix}.bias"), dim)?,
            eps: self.up.eps,
        })
    }

    /// Fused `[h, 3h]` Q|K|V projection from the three HF `[h, h]` weights.
    fn qkv(&self, prefix: &str, h: usize) -> Result<HostLinear, ModelError> {
        let parts = ["query", "key", "value"]
            .iter()
            .map(|p| self.weights.get(&format!("{prefix}.{p}.weight"), &[h, h]))
            .collect::<Result<Vec<_>, _>>()?;
        let biases = ["query", "key", "value"]
            .iter()
            .map(|p| self.weights.get(&format!("{prefix}.{p}.bias"), &[h]))
            .collect::<Result<Vec<_>, _>>()?;
        // weight[i, part*h + o] = W_part[o, i]
        let mut w = vec![0.0f32; h * 3 * h];
        for (p, part) in parts.iter().enumerate() {
            for o in 0..h {
                for i in 0..h {
                    w[i * 3 * h + p * h + o] = part[o * h + i];
                }
            }
        }
        Ok(HostLinear {
            w,
            b: biases.concat(),
            i: h,
            o: 3 * h,
        })
    }
}

impl Bert {
    /// Builds the model from parsed weights, checking every tensor against `cfg`. `dtype` other
    /// than f32 needs a GPU device (the host kernels are f32) that supports it.
    pub(crate) fn load(
        cfg: BertConfig,
        weights: &Weights<'_>,
        device: Device,
        host_kernels: bool,
        dtype: DType,
    ) -> Result<Self, ModelError> {
        let h = cfg.hidden_size;
        let l = Loader {
            weights,
            up: Uploader {
                device: &device,
                eps: cfg.layer_norm_eps,
                dtype,
            },
        };
        let word = weights.get("embeddings.word_embeddings.weight", &[cfg.vocab_size, h])?;
        let pos = weights.get(
            "embeddings.position_embeddings.weight",
            &[cfg.max_position_embeddings, h],
        )?;
        let types = weights.get(
            "embeddings.token_type_embeddings.weight",
            &[cfg.type_vocab_size, h],
        )?;
        let pos_type: Vec<f32> = pos[..cfg.max_tokens * h]
            .chunks_exact(h)
            .flat_map(|row| row.iter().zip(&types[..h]).map(|(p, t)| p + t))
            .collect();

        let mut host_layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            host_layers.push(HostLayer {
                qkv: l.qkv(&format!("{p}.attention.self"), h)?,
                attn_out: l.linear(&format!("{p}.attention.output.dense"), h, h)?,
                attn_norm: l.norm_host(&format!("{p}.attention.output.LayerNorm"), h)?,
                ffn_in: l.linear(&format!("{p}.intermediate.dense"), h, cfg.intermediate_size)?,
                ffn_out: l.linear(&format!("{p}.output.dense"), cfg.intermediate_size, h)?,
                ffn_norm: l.norm_host(&format!("{p}.output.LayerNorm"), h)?,
            });
        }
        // One copy of the layers: on the host for the host path, on the device otherwise.
        let layers = if host_kernels {
            Vec::new()
        } else {
            std::mem::take(&mut host_layers)
                .iter()
                .map(|hl| l.up.upload_layer(hl))
                .collect()
        };
        Ok(Self {
            word: l.up.tensor2(word, cfg.vocab_size, h),
            pos_type: l.up.tensor2(pos_type, cfg.max_tokens, h),
            emb_norm: l.layer_norm("embeddings.LayerNorm", h)?,
            layers,
            host_layers,
            host_kernels,
            dtype,
            device: device.clone(),
            cfg,
            small: std::sync::OnceLock::new(),
        })
    }

    /// The layers in half precision, packed on first use (~21 MB for MiniLM-L6).
    fn small_layers(&self) -> Result<&[SmallLayer], ModelError> {
        let made = self.small.get_or_init(|| {
            if self.host_layers.len() != self.cfg.num_hidden_layers {
                return Err("the half-precision query path needs the host's layers".to_string());
            }
            Ok(self
                .host_layers
                .iter()
                .map(|l| SmallLayer {
                    qkv: packed(&l.qkv),
                    attn_out: packed(&l.attn_out),
                    attn_norm: l.attn_norm.clone(),
                    ffn_in: packed(&l.ffn_in),
                    ffn_out: packed(&l.ffn_out),
                    ffn_norm: l.ffn_norm.clone(),
                })
                .collect())
        });
        made.as_deref()
            .map_err(|e| ModelError::Inference(e.clone()))
    }

    /// Packs the half-precision layers now rather than on the first query.
    pub(crate) fn prepare_query_path(&self) -> Result<(), ModelError> {
        self.small_layers().map(|_| ())
    }

    /// Whether [`Self::forward_query`] applies: the host kernels over f32 weights, on a CPU
    /// with the half-precision kernel (AVX2, FMA, F16C).
    pub(crate) fn query_path(&self) -> bool {
        self.host_kernels && self.dtype == DType::F32 && small::kernel_available()
    }

    /// One sequence (`ids`, with its special tokens) through the encoder with the layers'
    /// weights in half precision ([`crate::small`]); returns its pooled, not yet normalised
    /// vector. The embeddings and their norm are the f32 ones.
    pub(crate) fn forward_query(&self, ids: &[u32]) -> Result<Vec<f32>, ModelError> {
        let seq = ids.len();
        let h = self.cfg.hidden_size;
        let nh = self.cfg.num_attention_heads;
        let eps = self.cfg.layer_norm_eps as f32;
        let tanh = self.cfg.activation == Activation::GeluTanh;
        if seq == 0 || seq > self.cfg.max_tokens {
            return Err(ModelError::Inference(format!(
                "a query of {seq} tokens (1 to {} allowed)",
                self.cfg.max_tokens
            )));
        }
        let layers = self.small_layers()?;
        let ids: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        let mut x = host(self.embeddings(ids, 1, seq))?;
        for (l, s) in self.host_layers.iter().zip(layers) {
            let qkv = s.qkv.forward(&x, seq);
            let ctx = cpu::attention(&qkv, &[seq], seq, nh, h / nh);
            let mut a = s.attn_out.forward(&ctx, seq);
            a.iter_mut().zip(&x).for_each(|(a, x)| *a += x);
            small::layer_norm(&mut a, &s.attn_norm.0, &s.attn_norm.1, eps);
            x = a;
            let mut inner = s.ffn_in.forward_no_bias(&x, seq);
            cpu::bias_gelu(&mut inner, &l.ffn_in.b, tanh);
            let mut o = s.ffn_out.forward(&inner, seq);
            debug_assert_eq!(s.ffn_out.out_dim(), h);
            o.iter_mut().zip(&x).for_each(|(o, x)| *o += x);
            small::layer_norm(&mut o, &s.ffn_norm.0, &s.ffn_norm.1, eps);
            x = o;
        }
        Ok(match self.cfg.pooling {
            Pooling::Mean => {
                let mut v = vec![0f32; h];
                for row in x.chunks_exact(h) {
                    v.iter_mut().zip(row).for_each(|(v, r)| *v += r);
                }
                let inv = 1.0 / seq as f32;
                v.iter_mut().for_each(|v| *v *= inv);
                v
            }
            Pooling::Cls => x[..h].to_vec(),
        })
    }

    /// Whether batches run through the fused host kernels ([`Bert::forward`]) rather than on a
    /// device ([`Bert::forward_device`]).
    pub(crate) fn host_kernels(&self) -> bool {
        self.host_kernels
    }

    /// The device the model lives on.
    #[allow(dead_code)] // used by the GPU features only
    pub(crate) fn device(&self) -> &Device {
        &self.device
    }

    /// Forces the backend-generic burn ops (the GPU code path) even on the CPU backend.
    pub(crate) fn disable_host_kernels(&mut self) {
        if self.layers.is_empty() {
            let up = Uploader {
                device: &self.device,
                eps: self.cfg.layer_norm_eps,
                dtype: self.dtype,
            };
            self.layers = (self.host_layers.iter())
                .map(|hl| up.upload_layer(hl))
                .collect();
        }
        self.host_kernels = false;
    }

    pub(crate) fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    pub(crate) fn max_tokens(&self) -> usize {
        self.cfg.max_tokens
    }

    /// `LayerNorm(input @ W + b + residual)`: on a GPU device the matmul, then one fused
    /// kernel for the rest ([`crate::gpu::layers`]); elsewhere burn ops.
    fn add_norm(
        &self,
        lin: &Linear,
        input: Tensor<2>,
        residual: Tensor<2>,
        norm: &LayerNorm,
    ) -> Tensor<2> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if !self.host_kernels && crate::gpu::layers::fused(crate::gpu::layers::Fused::Norm) {
            let y = linear(input, lin.weight.clone(), None);
            return crate::gpu::layers::bias_residual_norm_tensor(
                &y,
                &lin.bias,
                &residual,
                &norm.gamma,
                &norm.beta,
                norm.eps,
            )
            .unwrap_or_else(|| norm.forward(y + lin.bias.clone().unsqueeze() + residual));
        }
        norm.forward(lin.forward(input) + residual)
    }

    /// `act(x @ W_in + b_in)` through burn (the device path; the host path is
    /// [`crate::host`]), bias and GELU fused on a GPU when `CIX_FUSED` says so.
    fn ffn_in_act(&self, layer: &EncoderLayer, x: Tensor<2>) -> Tensor<2> {
        let tanh = self.cfg.activation == Activation::GeluTanh;
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if crate::gpu::layers::fused(crate::gpu::layers::Fused::Gelu) {
            let pre = linear(x, layer.ffn_in.weight.clone(), None);
            if let Some(out) = crate::gpu::layers::bias_gelu_tensor(&pre, &layer.ffn_in.bias, tanh)
            {
                return out;
            }
            let inner = pre + layer.ffn_in.bias.clone().unsqueeze();
            return if tanh {
                gelu_approximate(inner)
            } else {
                gelu(inner)
            };
        }
        let inner = layer.ffn_in.forward(x);
        if tanh {
            gelu_approximate(inner)
        } else {
            gelu(inner)
        }
    }

    /// The embedding layer: word + (position + token type 0) of `ids` (`[b, seq]` row-major),
    /// then its LayerNorm; `[b * seq, h]`.
    fn embeddings(&self, ids: Vec<i64>, b: usize, seq: usize) -> Tensor<2> {
        let h = self.cfg.hidden_size;
        let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [b * seq]), &self.device);
        let words = self.word.clone().select(0, ids).reshape([b, seq, h]);
        let pos = self.pos_type.clone().narrow(0, 0, seq).unsqueeze::<3>();
        self.emb_norm.forward((words + pos).reshape([b * seq, h]))
    }

    /// The transformer over one padded batch through burn's ops (the device path, and the
    /// portable one on the CPU): `ids` is `[lengths.len(), seq]` row-major, right-padded;
    /// `lengths[b] <= seq` are the real token counts; `key_mask` makes the key-padding mask for
    /// burn's attention (true = masked out; `None` when nothing is padded), called only if
    /// burn's attention runs. Returns the last hidden state `[b * seq, h]`.
    fn encode(
        &self,
        ids: Vec<i64>,
        lengths: &[usize],
        seq: usize,
        key_mask: impl Fn() -> Option<Tensor<4, Bool>>,
    ) -> Result<Tensor<2>, ModelError> {
        // burn's attention needs the key-padding mask: made on first use, once per batch.
        let mut mask: Option<Option<Tensor<4, Bool>>> = None;
        let b = lengths.len();
        let h = self.cfg.hidden_size;
        let nh = self.cfg.num_attention_heads;
        let dh = h / nh;

        // Embeddings: word + (position + token type 0), then LayerNorm. x is [b*seq, h].
        let mut x = self.embeddings(ids, b, seq);

        for layer in &self.layers {
            let qkv = layer.qkv.forward(x.clone()); // [b*seq, 3h]
            let ctx = if let Some(ctx) = self.fused_attention(&qkv, lengths, seq) {
                ctx
            } else {
                let mask = mask.get_or_insert_with(&key_mask).clone();
                // [b*seq, 3h] -> [3, b, nh, seq, dh]
                let qkv = qkv.reshape([b, seq, 3, nh, dh]).permute([2, 0, 3, 1, 4]);
                let q = qkv.clone().narrow(0, 0, 1).squeeze_dim::<4>(0);
                let k = qkv.clone().narrow(0, 1, 1).squeeze_dim::<4>(0);
                let v = qkv.narrow(0, 2, 1).squeeze_dim::<4>(0);
                self.flash_attention(&q, &k, &v, mask.as_ref())
                    .unwrap_or_else(|| {
                        attention(q, k, v, mask, None, AttentionModuleOptions::default())
                    })
                    .swap_dims(1, 2)
                    .reshape([b * seq, h])
            };
            x = self.add_norm(&layer.attn_out, ctx, x, &layer.attn_norm);

            let inner = self.ffn_in_act(layer, x.clone());
            x = self.add_norm(&layer.ffn_out, inner, x, &layer.ffn_norm);
        }
        Ok(x)
    }

    /// burn's flash attention with one unit per row when `CIX_FUSED` names `flash-unit` (the
    /// default), on a GPU device; `None` otherwise, or when it cannot run (a refusal is said
    /// once on stderr): the caller then runs burn's attention.
    #[allow(unused_variables)] // the CPU-only build has no kernel
    fn flash_attention(
        &self,
        q: &Tensor<4>,
        k: &Tensor<4>,
        v: &Tensor<4>,
        mask: Option<&Tensor<4, Bool>>,
    ) -> Option<Tensor<4>> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if crate::gpu::layers::fused(crate::gpu::layers::Fused::FlashUnit) {
            match crate::gpu::attention::flash_tensor(q, k, v, mask) {
                Ok(ctx) => return ctx,
                Err(why) => {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        eprintln!(
                            "CIX_FUSED: burn's flash attention cannot run here ({why}); burn's \
                             attention runs instead"
                        )
                    });
                }
            }
        }
        None
    }

    /// The context of one layer's attention from the fused kernel
    /// ([`crate::gpu::attention`](mod@crate::gpu::attention)) on a GPU device; `None` on the
    /// CPU backend, with `CIX_FUSED` not naming `attention`, or for a shape the kernel does not take.
    #[allow(unused_variables)] // the CPU-only build has no kernel
    fn fused_attention(&self, qkv: &Tensor<2>, lengths: &[usize], seq: usize) -> Option<Tensor<2>> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        {
            if !crate::gpu::layers::fused(crate::gpu::layers::Fused::Attention) {
                return None;
            }
            let nh = self.cfg.num_attention_heads;
            crate::gpu::attention::attention_tensor(
                qkv,
                lengths,
                seq,
                nh,
                self.cfg.hidden_size / nh,
            )
        }
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        None
    }

    /// Encodes one padded batch on the host path ([`crate::host`]).
    ///
    /// `ids` is `[lengths.len(), seq]` row-major, right-padded; `lengths[b] <= seq` are the real
    /// token counts. Returns `[batch, hidden]` pooled (not yet normalised) vectors.
    pub(crate) fn forward(
        &self,
        ids: Vec<i64>,
        lengths: &[usize],
        seq: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let b = lengths.len();
        let h = self.cfg.hidden_size;
        if self.host_layers.len() != self.cfg.num_hidden_layers {
            return Err(ModelError::Inference(
                "the host path needs the host's layers (the model was loaded for a device)"
                    .to_string(),
            ));
        }
        let x = host(self.embeddings(ids, b, seq))?;
        let shape = host::Shape {
            lengths,
            seq,
            heads: self.cfg.num_attention_heads,
            eps: self.cfg.layer_norm_eps as f32,
            gelu_tanh: self.cfg.activation == Activation::GeluTanh,
        };
        let x = host::encode(&self.host_layers, x, &shape);
        Ok(match self.cfg.pooling {
            Pooling::Mean => host::mean_pool(&x, lengths, seq, h),
            Pooling::Cls => x
                .chunks_exact(seq * h)
                .flat_map(|s| &s[..h])
                .copied()
                .collect(),
        })
    }

    /// Encodes one padded batch on the device path and pools it there: returns `[batch, hidden]`
    /// f32 L2-normalised vectors as a device tensor, not yet read back, so the host can prepare
    /// the next batch while this one runs. Only `ids` and `lengths` are uploaded; the attention
    /// and pooling masks are built on the device from the lengths.
    pub(crate) fn forward_device(
        &self,
        ids: Vec<i64>,
        lengths: &[usize],
        seq: usize,
    ) -> Result<Tensor<2>, ModelError> {
        let b = lengths.len();
        let h = self.cfg.hidden_size;
        let dev = &self.device;
        let lens: Vec<i64> = lengths.iter().map(|&l| l as i64).collect();
        let lens = Tensor::<1, Int>::from_data(TensorData::new(lens, [b]), dev)
            .reshape([b, 1])
            .expand([b, seq]);
        let positions = Tensor::<1, Int>::arange(0..seq as i64, dev)
            .reshape([1, seq])
            .expand([b, seq]);
        let valid = positions.lower(lens); // [b, seq]: true for real tokens
        let mask = || {
            lengths.iter().any(|&len| len < seq).then(|| {
                valid
                    .clone()
                    .bool_not()
                    .reshape([b, 1, 1, seq])
                    .expand([b, 1, seq, seq])
            })
        };
        let x = self.encode(ids, lengths, seq, mask)?.reshape([b, seq, h]);
        let pooled = match self.cfg.pooling {
            Pooling::Mean => {
                let weights = valid.float().cast(DType::F32);
                #[cfg(any(feature = "wgpu", feature = "cuda"))]
                if let Some(p) = crate::gpu::pool_normalize_tensor(&x, &weights) {
                    return Ok(p);
                }
                // Masked mean as one batched matmul: [b, 1, seq] @ [b, seq, h].
                let counts = weights.clone().sum_dim(1).clamp_min(1.0); // [b, 1]
                let w = (weights / counts).reshape([b, 1, seq]).cast(self.dtype);
                w.matmul(x).reshape([b, h]).cast(DType::F32)
            }
            Pooling::Cls => x.narrow(1, 0, 1).reshape([b, h]).cast(DType::F32),
        };
        let norm = pooled
            .clone()
            .powi_scalar(2)
            .sum_dim(1)
            .sqrt()
            .clamp_min(1e-12);
        Ok(pooled / norm)
    }
}
