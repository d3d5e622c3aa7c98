//! A Qwen3-architecture decoder: RMSNorm (pre-norm, plus per-head q/k norm), rotary position
//! embeddings, grouped-query attention, SwiGLU MLP, embeddings tied to the output head. The
//! same code serves the tiny arith model (character vocabulary, small sizes) and the real-size
//! shapes on random weights, so the CPU learning runs exercise the architecture the GPU
//! performance runs measure.
//!
//! Parameters are plain tensors in a fixed order with HF-style names (`model.layers.0.
//! self_attn.q_proj.weight`, ...), so saving, weight sync and the optimizer walk one list.

use tch::{Device, Kind, Tensor};

pub use copy_error::CopyError;
pub use kernels::rms_norm;
use kernels::{
    apply_rope, apply_rope_rolled, full_attention_mask, leading_padding, masked_attention,
    rope_tables,
};
pub use rlharness_arctic::torch_spec::decoder::DecoderConfig;

/// Per-layer indices into the parameter list (fixed by `parameter_shapes`).
const PER_LAYER: usize = 11;

/// The model's weights. `params[k]` is the tensor named `names[k]`.
#[derive(Debug)]
pub struct Decoder {
    pub config: DecoderConfig,
    pub names: Vec<String>,
    pub params: Vec<Tensor>,
    pub device: Device,
    pub kind: Kind,
    /// Take the fused paths (one QKV and one gate/up GEMM, aten's RMSNorm kernel, GQA inside
    /// SDPA). On by default on CUDA; the CPU keeps the plain composition, so its bit-exact
    /// runs and goldens stay. The two agree to rounding (a test runs both).
    pub fused: bool,
    /// Decode through a captured CUDA graph (`cuda_graph.rs`; fused path on CUDA only): set
    /// by the engine from `backend.cuda_graphs` (`torch_perf --graphs`). Off by default.
    pub graphs: bool,
    /// Each layer's concatenated QKV and gate/up weights, made once for a sampling call
    /// ([`Decoder::for_decoding`]) so that no decode step copies them; `None` (the fused path
    /// then concatenates per forward, which autograd needs) on every trainer copy.
    pub(crate) fused_weights: Option<Vec<[Tensor; 2]>>,
}

/// Decode-time attention on the fused path runs over whole buckets of this many cache
/// positions ([`KvCache::attended`]), so the kernels see a handful of shapes per call (each
/// shape pays a set-up once, and a CUDA graph is captured per bucket) while a step reads little
/// more than the filled part of the cache. Attention reads every key and value it is given:
/// over the whole cache it cost about 1.5x this on the recipe's shape (prompt 512, response
/// 1024; measured on an H200, cuDNN attention at batch 80: 0.137 ms a layer at 1,536
/// positions, 0.096 at 1,024, 0.077 at 768).
pub const KV_BUCKET: i64 = 256;

/// Keys and values of one layer for incremental decoding, written in place.
pub struct LayerCache {
    k: Tensor,
    v: Tensor,
}

/// The KV cache of a batch: preallocated to the longest sequence it will hold.
pub struct KvCache {
    layers: Vec<LayerCache>,
    /// Positions filled so far.
    pub len: i64,
    /// Attention on the fused path reads whole buckets of this many positions
    /// ([`KvCache::attended`]); [`KV_BUCKET`] unless a test picks a smaller one.
    pub bucket: i64,
}

impl KvCache {
    /// The positions attention reads on the fused path once `filled` are written: the
    /// filled part rounded up to a whole bucket, at most the capacity.
    pub fn attended(&self, filled: i64) -> i64 {
        let capacity = self.layers.first().map_or(filled, |lc| lc.k.size()[2]);
        ((filled + self.bucket - 1) / self.bucket * self.bucket).min(capacity)
    }
}

/// The inputs of [`Decoder::decode_step`], in buffers that the step reads in place (a CUDA
/// graph replays on the same addresses): tokens `ids [B,1]`, their rotary `positions [B,1]`,
/// the cache slot `at` (one element), `key_ok [B,1,1,L]` (real tokens) and
/// `kpos [1,1,1,L]` (0..L) for a cache of capacity L.
pub struct DecodeInputs {
    pub ids: Tensor,
    pub positions: Tensor,
    pub at: Tensor,
    key_ok: Tensor,
    kpos: Tensor,
}

impl DecodeInputs {
    /// For the first decode step after a prefill of `prompt_len` positions, whose rows'
    /// next positions are `next_pos [B,1]`; `key_mask [B,L]` marks real tokens.
    pub fn new(key_mask: &Tensor, next_pos: &Tensor, prompt_len: i64) -> DecodeInputs {
        let device = key_mask.device();
        let (b, cap) = (key_mask.size()[0], key_mask.size()[1]);
        DecodeInputs {
            ids: Tensor::zeros([b, 1], (Kind::Int64, device)),
            positions: next_pos.copy(),
            at: Tensor::full([1], prompt_len, (Kind::Int64, device)),
            key_ok: key_mask.to_kind(Kind::Bool).view([b, 1, 1, cap]),
            kpos: Tensor::arange(cap, (Kind::Int64, device)).view([1, 1, 1, cap]),
        }
    }

    /// On to the next position (in place).
    pub fn advance(&mut self) {
        self.positions += 1;
        self.at += 1;
    }
}

impl Decoder {
    /// Random initialisation as HF's Qwen3 does it: normal(0, 0.02) matrices, unit norms.
    /// Draws from torch's global generator; the caller seeds it.
    pub fn new_random(config: DecoderConfig, device: Device, kind: Kind) -> Decoder {
        let _guard = tch::no_grad_guard();
        let mut names = Vec::new();
        let mut params = Vec::new();
        for (name, shape) in config.parameter_shapes() {
            let t = if shape.len() == 1 {
                Tensor::ones(shape.as_slice(), (Kind::Float, Device::Cpu))
            } else {
                Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu)) * 0.02
            };
            names.push(name);
            params.push(t.to_device(device).to_kind(kind));
        }
        Decoder {
            config,
            names,
            params,
            device,
            kind,
            fused: device != Device::Cpu,
            graphs: false,
            fused_weights: None,
        }
    }

    /// A copy with its own storage (the sampler and reference copies of the trainer).
    pub fn deep_copy(&self) -> Decoder {
        let _guard = tch::no_grad_guard();
        Decoder {
            config: self.config.clone(),
            names: self.names.clone(),
            params: self.params.iter().map(|p| p.detach().copy()).collect(),
            device: self.device,
            kind: self.kind,
            fused: self.fused,
            graphs: self.graphs,
            fused_weights: None,
        }
    }

    /// A copy with its own storage on `device` (a role of the split layout on a device of
    /// its own). CUDA graphs are captured on the current device's side stream, cuda:0's, so a
    /// copy on another CUDA device decodes eagerly.
    pub fn copy_to(&self, device: Device) -> Decoder {
        let _guard = tch::no_grad_guard();
        Decoder {
            config: self.config.clone(),
            names: self.names.clone(),
            params: self
                .params
                .iter()
                .map(|p| p.detach().to_device(device).copy())
                .collect(),
            device,
            kind: self.kind,
            fused: self.fused,
            graphs: self.graphs && device == Device::Cuda(0),
            fused_weights: None,
        }
    }

    /// A handle on the same storage (no copy): what a sampling call reads while the job's
    /// lock is free for others. Writers of the weights wait on the engine's weight gate.
    pub fn share(&self) -> Decoder {
        Decoder {
            config: self.config.clone(),
            names: self.names.clone(),
            params: self.params.iter().map(|p| p.shallow_clone()).collect(),
            device: self.device,
            kind: self.kind,
            fused: self.fused,
            graphs: self.graphs,
            fused_weights: None,
        }
    }

    /// A handle on the same weights for one sampling call (no gradients): on the fused path
    /// it carries each layer's QKV and gate/up weights concatenated once, where the training
    /// forward concatenates them per call (measured on an H200 at the Qwen3-0.6B shape: 0.73
    /// ms of copies per decode step, an eighth of the step). Elsewhere a plain [`share`].
    ///
    /// [`share`]: Decoder::share
    pub fn for_decoding(&self) -> Decoder {
        let mut d = self.share();
        if self.fused {
            let _guard = tch::no_grad_guard();
            d.fused_weights = Some(
                (0..self.config.layers)
                    .map(|l| {
                        let w = self.layer(l);
                        [
                            Tensor::cat(&[&w[1], &w[2], &w[3]], 0),
                            Tensor::cat(&[&w[8], &w[9]], 0),
                        ]
                    })
                    .collect(),
            );
        }
        d
    }

    pub fn set_requires_grad(&mut self, on: bool) {
        self.params = self
            .params
            .iter()
            .map(|p| p.detach().set_requires_grad(on))
            .collect();
    }

    /// Overwrite this model's weights with `src`'s (weight sync, checkpoint load).
    pub fn copy_from(&mut self, src: &[Tensor]) -> Result<(), CopyError> {
        if src.len() != self.params.len() {
            return Err(CopyError::Count {
                got: src.len(),
                want: self.params.len(),
            });
        }
        let _guard = tch::no_grad_guard();
        for ((dst, s), name) in self.params.iter_mut().zip(src).zip(&self.names) {
            if dst.size() != s.size() {
                return Err(CopyError::Shape {
                    name: name.clone(),
                    want: dst.size(),
                    got: s.size(),
                });
            }
            dst.copy_(&s.to_device(self.device).to_kind(self.kind));
        }
        Ok(())
    }

    /// The weights by name, detached, on the host and contiguous: in `kind` when given, else
    /// in the model's dtype (checkpoints, tests, inspection).
    pub fn host_weights(&self, kind: Option<Kind>) -> Vec<(String, Tensor)> {
        let _guard = tch::no_grad_guard();
        let host = |p: &Tensor| {
            let t = p.detach().to_device(Device::Cpu).contiguous();
            match kind {
                Some(k) => t.to_kind(k),
                None => t,
            }
        };
        self.names
            .iter()
            .cloned()
            .zip(self.params.iter().map(host))
            .collect()
    }

    pub fn num_parameters(&self) -> u64 {
        self.params.iter().map(|p| p.numel() as u64).sum()
    }

    fn embed(&self) -> &Tensor {
        &self.params[0]
    }

    /// The output head's weight `[V,H]`: the tied input embedding.
    pub fn head_weight(&self) -> &Tensor {
        self.embed()
    }

    fn layer(&self, l: usize) -> &[Tensor] {
        &self.params[1 + l * PER_LAYER..1 + (l + 1) * PER_LAYER]
    }

    fn final_norm(&self) -> &Tensor {
        &self.params[self.params.len() - 1]
    }

    /// The final hidden states `[B,S,H]` for a full (padded) batch. `positions [B,S]` are the
    /// rotary positions; `key_mask [B,S]` (1 = real token) keeps padding out of attention.
    /// Without padding the causal flag alone is used, which lets CUDA pick flash attention.
    pub fn hidden_states(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        key_mask: Option<&Tensor>,
    ) -> Tensor {
        let (b, s) = ids.size2().unwrap_or((1, ids.numel() as i64));
        if self.fused {
            if let Some(lead) = key_mask.and_then(leading_padding) {
                // verl's layout (left-padded prompt, right-padded response): roll each row so
                // its padding is all on the right. Real tokens then see only real tokens under
                // the causal flag alone, and CUDA keeps flash attention; rotary positions
                // travel with their tokens, so the real positions' states are unchanged.
                let cols = Tensor::arange(s, (Kind::Int64, ids.device())).view([1, s]);
                let lead = lead.view([b, 1]);
                let there = (&cols + &lead).remainder(s);
                let back = (&cols - &lead).remainder(s);
                let h = self.hidden_states(
                    &ids.gather(1, &there, false),
                    &positions.gather(1, &there, false),
                    None,
                );
                let width = h.size()[2];
                return h.gather(1, &back.unsqueeze(-1).expand([b, s, width], false), false);
            }
        }
        let mut x = self
            .embed()
            .index_select(0, &ids.reshape([-1]))
            .reshape([b, s, -1]);
        let (cos, sin) = rope_tables(positions, &self.config, self.kind, self.fused);
        let mask = key_mask.map(|m| full_attention_mask(m, s));
        for l in 0..self.config.layers {
            x = self.block(
                l,
                &x,
                &cos,
                &sin,
                |q, k, v, gqa| match &mask {
                    Some(m) => Tensor::scaled_dot_product_attention(
                        q,
                        k,
                        v,
                        Some(m),
                        0.0,
                        false,
                        None,
                        gqa,
                    ),
                    None => Tensor::scaled_dot_product_attention(
                        q,
                        k,
                        v,
                        None::<&Tensor>,
                        0.0,
                        true,
                        None,
                        gqa,
                    ),
                },
                None,
            );
        }
        self.norm(&x, self.final_norm())
    }

    /// One decoder block. `attend` gets q `[B,nh,S,hd]` and k, v already repeated to `nh`
    /// heads. With a cache, the new keys/values are written at `cache.len` and attention runs
    /// over everything cached so far.
    fn block(
        &self,
        l: usize,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        attend: impl Fn(&Tensor, &Tensor, &Tensor, bool) -> Tensor,
        cache: Option<(&mut LayerCache, Slot<'_>)>,
    ) -> Tensor {
        let w = self.layer(l);
        let c = &self.config;
        let (b, s, _) = x.size3().unwrap_or((1, 1, 1));
        let (nh, nkv, hd) = (c.heads as i64, c.kv_heads as i64, c.head_dim as i64);
        let fused = self.fused_kernels();
        let norm = |t: &Tensor, w: &Tensor| self.norm(t, w);
        let h = norm(x, &w[0]);
        let (q, k, v) = if fused {
            // One GEMM for q, k and v: bigger tiles, two fewer launches per layer; the
            // backward of `cat` only splits the gradient.
            let qkv = match &self.fused_weights {
                Some(f) => h.matmul(&f[l][0].tr()),
                None => h.matmul(&Tensor::cat(&[&w[1], &w[2], &w[3]], 0).tr()),
            };
            let parts = qkv.split_with_sizes([nh * hd, nkv * hd, nkv * hd], -1);
            (
                parts[0].reshape([b, s, nh, hd]),
                parts[1].reshape([b, s, nkv, hd]),
                parts[2].reshape([b, s, nkv, hd]),
            )
        } else {
            (
                h.matmul(&w[1].tr()).reshape([b, s, nh, hd]),
                h.matmul(&w[2].tr()).reshape([b, s, nkv, hd]),
                h.matmul(&w[3].tr()).reshape([b, s, nkv, hd]),
            )
        };
        let q = norm(&q, &w[5]).transpose(1, 2);
        let k = norm(&k, &w[6]).transpose(1, 2);
        let v = v.transpose(1, 2);
        let rope = if fused { apply_rope_rolled } else { apply_rope };
        let q = rope(&q, cos, sin);
        let k = rope(&k, cos, sin);
        let (k, v) = match cache {
            Some((lc, Slot::At { start, kv_len })) => {
                lc.k.narrow(2, start, s).copy_(&k);
                lc.v.narrow(2, start, s).copy_(&v);
                (lc.k.narrow(2, 0, kv_len), lc.v.narrow(2, 0, kv_len))
            }
            Some((lc, Slot::Indexed { at, kv_len })) => {
                let _ = lc.k.index_copy_(2, at, &k);
                let _ = lc.v.index_copy_(2, at, &v);
                (lc.k.narrow(2, 0, kv_len), lc.v.narrow(2, 0, kv_len))
            }
            None => (k, v),
        };
        let rep = nh / nkv;
        // On CUDA, SDPA reads the shared key/value heads itself (`enable_gqa`); the CPU
        // kernels get them repeated, the layout the CPU numbers were recorded with.
        let (k, v) = if rep > 1 && !fused {
            (
                k.repeat_interleave_self_int(rep, 1, None),
                v.repeat_interleave_self_int(rep, 1, None),
            )
        } else {
            (k, v)
        };
        let a = attend(&q, &k, &v, fused && rep > 1)
            .transpose(1, 2)
            .reshape([b, s, nh * hd]);
        // On the fused path the residual adds ride in the GEMMs' epilogue (`addmm`).
        let width = x.size()[2];
        let residual = |x: &Tensor, y: &Tensor, w: &Tensor| {
            if fused {
                let k = y.size()[2];
                x.reshape([-1, width])
                    .addmm(&y.reshape([-1, k]), &w.tr())
                    .view([b, s, width])
            } else {
                x + y.matmul(&w.tr())
            }
        };
        let x = residual(x, &a, &w[4]);
        let h = norm(&x, &w[7]);
        let act = if fused {
            let gu = match &self.fused_weights {
                Some(f) => h.matmul(&f[l][1].tr()),
                None => h.matmul(&Tensor::cat(&[&w[8], &w[9]], 0).tr()),
            };
            let parts = gu.split(c.intermediate as i64, -1);
            parts[0].silu() * &parts[1]
        } else {
            h.matmul(&w[8].tr()).silu() * h.matmul(&w[9].tr())
        };
        residual(&x, &act, &w[10])
    }

    fn fused_kernels(&self) -> bool {
        self.fused
    }

    fn norm(&self, x: &Tensor, weight: &Tensor) -> Tensor {
        if self.fused_kernels() {
            let d = x.size().last().copied().unwrap_or(1);
            Tensor::rms_norm(x, [d].as_slice(), Some(weight), Some(self.config.rms_eps))
        } else {
            rms_norm(x, weight, self.config.rms_eps)
        }
    }

    /// Logits `[.., V]` of hidden states through the tied head. `fp32` computes the product
    /// in fp32 (`logits.compute_in_fp32`); otherwise it runs in the model dtype and is then
    /// widened, so under bf16 the logits carry bf16 rounding.
    pub fn logits(&self, hidden: &Tensor, fp32: bool) -> Tensor {
        if fp32 || self.kind == Kind::Float {
            hidden
                .to_kind(Kind::Float)
                .matmul(&self.embed().to_kind(Kind::Float).tr())
        } else {
            hidden.matmul(&self.embed().tr()).to_kind(Kind::Float)
        }
    }

    /// An empty cache for `batch` sequences of up to `capacity` tokens.
    pub fn new_cache(&self, batch: i64, capacity: i64) -> KvCache {
        let c = &self.config;
        let shape = [batch, c.kv_heads as i64, capacity, c.head_dim as i64];
        KvCache {
            layers: (0..c.layers)
                .map(|_| LayerCache {
                    k: Tensor::zeros(shape, (self.kind, self.device)),
                    v: Tensor::zeros(shape, (self.kind, self.device)),
                })
                .collect(),
            len: 0,
            bucket: KV_BUCKET,
        }
    }

    /// Run `ids [B,s]` (at `positions [B,s]`) through the model, appending their keys and
    /// values to `cache`; returns the last position's hidden state `[B,H]`. `key_mask [B,L]`
    /// marks which of the `cache.len + s` cached positions are real tokens.
    pub fn extend(
        &self,
        cache: &mut KvCache,
        ids: &Tensor,
        positions: &Tensor,
        key_mask: &Tensor,
    ) -> Tensor {
        let (b, s) = ids.size2().unwrap_or((1, 1));
        let start = cache.len;
        let total = start + s;
        let x = self
            .embed()
            .index_select(0, &ids.reshape([-1]))
            .reshape([b, s, -1]);
        let (cos, sin) = rope_tables(positions, &self.config, self.kind, self.fused);
        // On CUDA attention runs over whole buckets of the cache ([`KvCache::attended`]), so decode
        // steps share a few shapes: a new key length per step made each step pay the attention
        // kernel's per-shape set-up (measured: ~70 ms a step, whatever the batch). Positions
        // not yet written are masked like future ones. The CPU attends over the filled part
        // only, as recorded.
        let kv_len = if self.fused {
            cache.attended(total)
        } else {
            total
        };
        // Query i (absolute start + i) sees real keys up to itself, and always itself so a
        // padded query row is never empty.
        let key_ok = key_mask
            .narrow(1, 0, kv_len)
            .to_kind(Kind::Bool)
            .view([b, 1, 1, kv_len]);
        let qpos = Tensor::arange_start(start, total, (Kind::Int64, self.device)).view([s, 1]);
        let kpos = Tensor::arange(kv_len, (Kind::Int64, self.device)).view([1, kv_len]);
        let causal = kpos.le_tensor(&qpos).view([1, 1, s, kv_len]);
        let diag = kpos.eq_tensor(&qpos).view([1, 1, s, kv_len]);
        let mask = key_ok.logical_and(&causal).logical_or(&diag);
        let x = self.cached_layers(x, &cos, &sin, &mask, cache, Slot::At { start, kv_len });
        cache.len = total;
        let last = x.narrow(1, s - 1, 1).squeeze_dim(1);
        self.norm(&last, self.final_norm())
    }

    /// One decode step of the fused (CUDA) path with no host-side position: the tokens of
    /// `inp` at its positions, keys and values written at cache position `inp.at`, attention
    /// over the cache's first `kv_len` positions (pass `cache.attended(at + 1)`). Every step
    /// of one `kv_len` queues the same kernels on the same addresses, so a CUDA graph can
    /// capture one and replay it for the rest (`sample`). The caller advances `inp`
    /// ([`DecodeInputs::advance`]); `cache.len` is not kept. Computes what
    /// [`Decoder::extend`] computes for one token on the fused path.
    pub fn decode_step(&self, cache: &mut KvCache, inp: &DecodeInputs, kv_len: i64) -> Tensor {
        let (ids, positions, at) = (&inp.ids, &inp.positions, &inp.at);
        let (key_ok, kpos) = (
            inp.key_ok.narrow(3, 0, kv_len),
            inp.kpos.narrow(3, 0, kv_len),
        );
        let b = ids.size()[0];
        let x = self
            .embed()
            .index_select(0, &ids.reshape([-1]))
            .reshape([b, 1, -1]);
        let (cos, sin) = rope_tables(positions, &self.config, self.kind, self.fused);
        let q = at.view([1, 1, 1, 1]);
        let mask = key_ok
            .logical_and(&kpos.le_tensor(&q))
            .logical_or(&kpos.eq_tensor(&q));
        let x = self.cached_layers(x, &cos, &sin, &mask, cache, Slot::Indexed { at, kv_len });
        self.norm(&x.squeeze_dim(1), self.final_norm())
    }

    /// Every block over `x`, attending with `mask` and writing its keys and values into the
    /// cache at `slot`.
    fn cached_layers(
        &self,
        mut x: Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: &Tensor,
        cache: &mut KvCache,
        slot: Slot<'_>,
    ) -> Tensor {
        for (l, lc) in cache.layers.iter_mut().enumerate() {
            x = self.block(l, &x, cos, sin, masked_attention(mask), Some((lc, slot)));
        }
        x
    }
}

/// Where a call writes its new keys and values into a layer's cache.
#[derive(Clone, Copy)]
enum Slot<'a> {
    /// At a position known on the host; attention runs over the first `kv_len` positions.
    At { start: i64, kv_len: i64 },
    /// One token per row at the position the one-element device tensor `at` holds;
    /// attention runs over the first `kv_len` positions.
    Indexed { at: &'a Tensor, kv_len: i64 },
}

mod copy_error;
mod kernels;

#[cfg(test)]
mod tests;
