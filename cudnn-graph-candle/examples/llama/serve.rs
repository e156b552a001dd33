//! Continuous-batching decode of the Llama layer of `layer.rs`, two ways on the same weights:
//!
//! - [`PagedEngine`]: the layer's cudnn-graph types for the projections and norms, and paged
//!   decode attention ([`PagedDecode`]) over a [`PagedKvCache`]: each step's batch is padded to a
//!   batch bucket and its longest sequence picks a width class, so one plan per (bucket, class)
//!   serves every step and nothing is built after warm-up;
//! - [`CandleEngine`]: candle's own decode, one dense cache per sequence (`Tensor::cat` of each
//!   new token's K/V, as candle-transformers' Llama keeps it) and candle's attention per
//!   sequence (candle has no batched attention over sequences of different lengths), the
//!   projections batched over the step's sequences.
//!
//! Both take the same prefill (candle's K/V projections and rotary embedding of the prompt) and
//! the same per-step input rows, so their outputs can be compared step by step. Shared by
//! `examples/llama_serve.rs` and the crate's tests.

use std::collections::HashMap;

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::rotary_emb::{rope, rope_thd};
use cudnn_graph::graph;
use cudnn_graph::serving::{PagePool, PageTable, SeqId};
use cudnn_graph_candle::{PagedKvCache, Runner};

use super::layer::{Cache, Layer};

graph! {
    /// Paged decode attention: one query token for each of `B` rows over the layer's K/V pools
    /// (`P` pages of `PS` tokens), each row's pages named by its `W`-wide table row. Rows past the
    /// step's sequences hold length 0.
    pub PagedDecode<dyn B, dyn P, dyn W, dyn H, dyn HKV, dyn PS, dyn DH>(
        q: bf16[B, H, 1, DH],
        k_pool: bf16[P, HKV, PS, DH],
        v_pool: bf16[P, HKV, PS, DH],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        table: i32[B, 1, W, 1],
    ) -> (o: bf16[B, H, 1, DH]) {
        o = sdpa(q, k_pool, v_pool, seq_q, seq_kv, table, table, paged = true, padding_mask = true);
    }
}

/// A prompt's K and V after the layer's projections and rotary embedding, in candle's layout
/// (`[1, HKV, P, D]`, contiguous): what prefill leaves in a cache.
pub struct PromptKv {
    /// Keys.
    pub k: Tensor,
    /// Values.
    pub v: Tensor,
}

/// The rotary tables of every position a sequence can reach, `[positions, D / 2]`, and the rows
/// of given positions.
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    /// Tables for positions `0..positions`.
    pub fn new(layer: &Layer, positions: usize, device: &Device) -> Result<Rope> {
        let (cos, sin) = layer.rope_tables(0, positions, device)?;
        Ok(Rope { cos, sin })
    }

    /// The rows of `positions` (one per token), `[N, D / 2]` each.
    pub fn rows(&self, positions: &[u32]) -> Result<(Tensor, Tensor)> {
        let at = Tensor::from_slice(positions, positions.len(), self.cos.device())?;
        Ok((self.cos.index_select(&at, 0)?, self.sin.index_select(&at, 0)?))
    }

    /// The rows of positions `0..len`.
    pub fn prefix(&self, len: usize) -> Result<(Tensor, Tensor)> {
        Ok((self.cos.narrow(0, 0, len)?, self.sin.narrow(0, 0, len)?))
    }
}

/// The prefill both engines share: the prompt `x` (`[1, P, E]`) through the attention norm, the K
/// and V projections and the rotary embedding (candle's ops).
pub fn prefill_kv(layer: &Layer, rope_tables: &Rope, x: &Tensor) -> Result<PromptKv> {
    let n = layer.attn_norm_candle(x)?;
    let (_, k, v) = layer.qkv_candle(&n)?;
    let (cos, sin) = rope_tables.prefix(x.dim(1)?)?;
    Ok(PromptKv { k: rope(&k, &cos, &sin)?, v: v.contiguous()? })
}

/// candle's decode: a dense cache per sequence.
#[derive(Default)]
pub struct CandleEngine {
    caches: HashMap<SeqId, Cache>,
}

impl CandleEngine {
    /// Takes a prefilled sequence.
    pub fn admit(&mut self, seq: SeqId, kv: &PromptKv) {
        self.caches.insert(seq, Cache { k: kv.k.clone(), v: kv.v.clone() });
    }

    /// Forgets a finished sequence.
    pub fn finish(&mut self, seq: SeqId) {
        self.caches.remove(&seq);
    }

    /// One decode step of `seqs` on the rows of `x` (`[B, 1, E]`, one per sequence, each at its
    /// cache's length): `[B, 1, E]`.
    pub fn step(&mut self, layer: &Layer, rope_tables: &Rope, seqs: &[SeqId], x: &Tensor) -> Result<Tensor> {
        let b = seqs.len();
        let (h, hkv, d) = (layer.cfg.heads, layer.cfg.kv_heads, layer.cfg.head_dim());
        let mut positions = Vec::with_capacity(b);
        for seq in seqs {
            let cache = self
                .caches
                .get(seq)
                .ok_or_else(|| candle_core::Error::msg(format!("sequence {seq} was not admitted")))?;
            positions.push(cache.k.dim(2)? as u32);
        }
        let n = layer.attn_norm_candle(x)?;
        let (q, k, v) = layer.qkv_candle(&n)?;
        // Each row at its own position: the rows as the time axis of one sequence.
        let (cos, sin) = rope_tables.rows(&positions)?;
        let q = rope_thd(&q.reshape((1, b, h, d))?, &cos, &sin)?.reshape((b, h, 1, d))?;
        let k = rope_thd(&k.reshape((1, b, hkv, d))?, &cos, &sin)?.reshape((b, hkv, 1, d))?;
        let v = v.contiguous()?;
        let mut outs = Vec::with_capacity(b);
        for (i, seq) in seqs.iter().enumerate() {
            let cache = self
                .caches
                .get_mut(seq)
                .ok_or_else(|| candle_core::Error::msg(format!("sequence {seq} was not admitted")))?;
            cache.k = Tensor::cat(&[&cache.k, &k.narrow(0, i, 1)?], 2)?;
            cache.v = Tensor::cat(&[&cache.v, &v.narrow(0, i, 1)?], 2)?;
            outs.push(layer.attention_candle(&q.narrow(0, i, 1)?, &cache.k, &cache.v, None)?);
        }
        let attn = Tensor::cat(&outs, 0)?;
        let x1 = layer.o_proj_candle(&attn, x)?;
        let n2 = layer.mlp_norm_candle(&x1)?;
        let mlp = layer.swiglu_candle(&n2)?;
        layer.down_candle(&mlp, &x1)
    }
}

/// The paged engine's capacity classes: batch buckets (rows of a step, padded) and widths (pages
/// per sequence), each pair one plan of each graph.
#[derive(Debug, Clone)]
pub struct Classes {
    /// Batch buckets, ascending.
    pub buckets: Vec<usize>,
    /// Table widths, ascending.
    pub widths: Vec<usize>,
}

impl Classes {
    /// The smallest bucket holding `batch` rows and the narrowest width holding `pages`.
    pub fn pick(&self, batch: usize, pages: usize) -> Option<(usize, usize)> {
        let b = self.buckets.iter().position(|&x| x >= batch)?;
        let w = self.widths.iter().position(|&x| x >= pages)?;
        Some((b, w))
    }
}

/// The layer's decode from a paged cache, through cudnn-graph.
pub struct PagedEngine {
    /// The paged K/V cache.
    pub cache: PagedKvCache,
    /// Capacity classes.
    pub classes: Classes,
    /// One table per (bucket, width).
    tables: Vec<PageTable>,
    /// Scratch: the step's positions, padded.
    positions: Vec<u32>,
    /// Scratch: the step's append batch.
    batch: Vec<(SeqId, usize)>,
}

impl PagedEngine {
    /// A cache of `pool` pages for `layer`, on `device`, serving `classes`.
    pub fn new(layer: &Layer, pool: PagePool, classes: Classes, device: &Device) -> Result<PagedEngine> {
        let (hkv, d) = (layer.cfg.kv_heads, layer.cfg.head_dim());
        let cache = PagedKvCache::new(pool, hkv, d, DType::BF16, device)?;
        let mut tables = Vec::new();
        for &b in &classes.buckets {
            for &w in &classes.widths {
                tables.push(PageTable::new(b, w).map_err(candle_core::Error::wrap)?);
            }
        }
        Ok(PagedEngine { cache, classes, tables, positions: Vec::new(), batch: Vec::new() })
    }

    /// A new sequence holding the prefilled `kv`.
    pub fn admit(&mut self, kv: &PromptKv) -> Result<SeqId> {
        let seq = self.cache.add()?;
        let (_, hkv, p, d) = kv.k.dims4()?;
        let rows = |t: &Tensor| t.transpose(1, 2)?.contiguous()?.reshape((p, hkv, d));
        if let Err(e) = self.cache.append(&[(seq, p)], &rows(&kv.k)?, &rows(&kv.v)?) {
            self.cache.release(seq)?;
            return Err(e);
        }
        Ok(seq)
    }

    /// Ends a sequence: its pages go back.
    pub fn finish(&mut self, seq: SeqId) -> Result<()> {
        self.cache.release(seq)
    }

    /// One decode step of `seqs` on the rows of `x` (`[bucket, 1, E]`: one row per sequence, then
    /// padding rows, `bucket` from [`PagedEngine::bucket_for`]): `[bucket, 1, E]`, the padding
    /// rows' values meaningless.
    pub fn step(
        &mut self,
        runner: &Runner,
        layer: &Layer,
        rope_tables: &Rope,
        seqs: &[SeqId],
        x: &Tensor,
    ) -> Result<Tensor> {
        let (h, hkv, d) = (layer.cfg.heads, layer.cfg.kv_heads, layer.cfg.head_dim());
        let bucket = x.dim(0)?;
        let pages = self.cache.pages();
        self.positions.clear();
        let mut longest = 0;
        for &s in seqs {
            let len = pages.len(s).map_err(candle_core::Error::wrap)?;
            self.positions.push(len as u32);
            longest = longest.max(pages.pages_for(len + 1));
        }
        self.positions.resize(bucket, 0);
        let (bi, wi) = self
            .classes
            .pick(bucket, longest)
            .ok_or_else(|| candle_core::Error::msg(format!("no class holds {bucket} rows of up to {longest} pages")))?;
        if self.classes.buckets[bi] != bucket {
            candle_core::bail!("x has {bucket} rows, not a batch bucket ({:?})", self.classes.buckets);
        }
        let n = layer.attn_norm_graphs(runner, x)?;
        let [q, k, v] = layer.qkv_graphs(runner, &n)?;
        let (cos, sin) = rope_tables.rows(&self.positions)?;
        // Each row at its own position: the rows as the time axis of one sequence.
        let (q, k) = layer.rope_graphs(&q, &k, &cos, &sin, 1)?;
        let live = seqs.len();
        self.batch.clear();
        self.batch.extend(seqs.iter().map(|&s| (s, 1)));
        let k_rows = k.narrow(1, 0, live)?.reshape((live, hkv, d))?;
        let v_rows = v.narrow(1, 0, live)?.reshape((live, hkv, d))?;
        self.cache.append(&self.batch, &k_rows, &v_rows)?;
        let table = &mut self.tables[bi * self.classes.widths.len() + wi];
        let inputs = self.cache.step(table, seqs)?;
        let pool = self.cache.dims();
        let graph = PagedDecode::new(bucket, pool.pages, table.width(), h, hkv, pool.page_size, d);
        let [o]: [Tensor; 1] = runner
            .run(
                &graph,
                &[
                    &q.reshape((bucket, h, 1, d))?,
                    self.cache.k_pool(),
                    self.cache.v_pool(),
                    &inputs.seq_len_q,
                    &inputs.seq_len_kv,
                    &inputs.table,
                ],
            )?
            .try_into()
            .map_err(|_| candle_core::Error::msg("PagedDecode has one output"))?;
        // `o_proj_graphs` takes `[B, H, S, D]` over `[B, S, H, D]` storage.
        let x1 = layer.o_proj_graphs(runner, &o.reshape((bucket, 1, h, d))?.transpose(1, 2)?, x)?;
        let n2 = layer.mlp_norm_graphs(runner, &x1)?;
        let mlp = layer.swiglu_graphs(runner, &n2)?;
        layer.down_graphs(runner, &mlp, &x1)?.reshape((bucket, 1, layer.cfg.hidden))
    }

    /// The batch bucket `batch` rows are padded to.
    pub fn bucket_for(&self, batch: usize) -> Option<usize> {
        self.classes.buckets.iter().copied().find(|&b| b >= batch)
    }

    /// Runs one step of every (bucket, width) class with no sequence, so that every plan is built.
    pub fn warm_up(&mut self, runner: &Runner, layer: &Layer, rope_tables: &Rope, device: &Device) -> Result<()> {
        let widths = self.classes.widths.clone();
        for &bucket in &self.classes.buckets.clone() {
            let x = Tensor::zeros((bucket, 1, layer.cfg.hidden), DType::BF16, device)?;
            for &w in &widths {
                // A sequence whose length asks for width `w`: grown without K/V, then released.
                let seq = self.cache.add()?;
                let page = self.cache.dims().page_size;
                let len = (w - 1) * page;
                let (hkv, d) = (layer.cfg.kv_heads, layer.cfg.head_dim());
                let zeros = Tensor::zeros((len.max(1), hkv, d), DType::BF16, device)?;
                self.cache.append(&[(seq, len.max(1))], &zeros, &zeros)?;
                let stepped = self.step(runner, layer, rope_tables, &[seq], &x);
                self.cache.release(seq)?;
                stepped?;
            }
        }
        Ok(())
    }
}
