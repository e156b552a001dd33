//! The graphs of the padded class plan tests, attention and row-wise, shared by
//! `tests/suite/padded_classes.rs` (deviceless: masking, binding, the CPU reference),
//! `tests/gpu_suite/gpu_padded.rs` (executed on the GPU) and `tests/suite/cli.rs` (`aot --padded`); `D` is the
//! head dim, `E` the normalized width. Not every test file uses every item.

#![allow(dead_code)]

use cudnn_graph::{graph, DataType, Graph, GraphBuilder, Operand};

graph! {
    /// Causal grouped-query self-attention for training, sequence lengths in power-of-two
    /// classes.
    pub Causal<const D: usize, dyn S: 1..=1024 pow2>(q: bf16[2, 4, S, D], k: bf16[2, 2, S, D], v: bf16[2, 2, S, D])
        -> (o: bf16[2, 4, S, D], stats: f32[2, 4, S, 1])
    {
        let (out, lse) = sdpa(q, k, v, causal = true, training = true);
        o = out;
        stats = lse;
    }

    /// The gradients of `Causal`.
    pub CausalBackward<const D: usize, dyn S: 1..=1024 pow2>(
        q: bf16[2, 4, S, D], k: bf16[2, 2, S, D], v: bf16[2, 2, S, D],
        o: bf16[2, 4, S, D], d_o: bf16[2, 4, S, D], stats: f32[2, 4, S, 1],
    ) -> (d_q: bf16[2, 4, S, D], d_k: bf16[2, 2, S, D], d_v: bf16[2, 2, S, D]) {
        let (dq, dk, dv) = sdpa_backward(q, k, v, o, d_o, stats, causal = true);
        d_q = dq;
        d_k = dk;
        d_v = dv;
    }

    /// Cross-attention: query and key lengths of their own.
    pub Cross<const D: usize, dyn SQ: 1..=256 multiple(64), dyn SKV: 1..=256 multiple(64)>(
        q: bf16[1, 2, SQ, D], k: bf16[1, 2, SKV, D], v: bf16[1, 2, SKV, D]
    ) -> (o: bf16[1, 2, SQ, D]) {
        o = sdpa(q, k, v, scale = 0.2);
    }
}

graph! {
    /// Layer norm for training over rows of `E` (a token's activations), rows in power-of-two
    /// classes, then a GELU.
    pub LayerNormGelu<const E: usize, dyn T: 1..=4096 pow2>(x: bf16[T, E], scale: f32[1, E], bias: f32[1, E])
        -> (y: bf16[T, E], mean: f32[T, 1], inv_var: f32[T, 1])
    {
        let (h, m, v) = layernorm(x, scale, bias, 1e-5, phase = training);
        y = gelu(h);
        mean = m;
        inv_var = v;
    }

    /// Its gradients: DSCALE and DBIAS sum over the rows.
    pub LayerNormBackward<const E: usize, dyn T: 1..=4096 pow2>(
        dy: bf16[T, E], x: bf16[T, E], scale: f32[1, E], mean: f32[T, 1], inv_var: f32[T, 1],
    ) -> (dx: bf16[T, E], dscale: f32[1, E], dbias: f32[1, E]) {
        let (a, b, c) = layernorm_backward(dy, x, scale, mean, inv_var);
        dx = a;
        dscale = b;
        dbias = c;
    }

    /// RMS norm (inference) with a residual add.
    pub RmsResidual<const E: usize, dyn T: 1..=4096 pow2>(x: bf16[T, E], r: bf16[T, E], scale: f32[1, E])
        -> (y: bf16[T, E])
    {
        y = add(rmsnorm(x, scale, 1e-6), r);
    }
}

/// Causal attention `[2, 4, s, d]`, inputs and output stored `[B, S, H, D]` (BSHD), through the
/// builder.
pub fn bshd(s: i64, d: i64) -> Graph {
    let mut g = GraphBuilder::new("bshd");
    let mut qkv = Vec::new();
    for name in ["q", "k", "v"] {
        let t = g.input(name, DataType::BF16, &[2, 4, s, d]).unwrap();
        g.set_dim_order(t, &[0, 2, 1, 3]).unwrap();
        qkv.push(Operand::from(t));
    }
    let o = g.op("sdpa", &qkv, &[("causal".into(), true.into())]).unwrap()[0];
    g.set_dim_order(o, &[0, 2, 1, 3]).unwrap();
    g.output(o, "o", DataType::BF16).unwrap();
    g.build().unwrap()
}
