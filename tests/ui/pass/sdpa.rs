use cudnn_graph::graph;
use half::bf16;

graph! {
    /// Causal GQA attention for training: O and the softmax statistics.
    pub Forward<dyn S>(
        q: bf16[1, 4, S, 64],
        k: bf16[1, 2, S, 64],
        v: bf16[1, 2, S, 64],
    ) -> (o: bf16[1, 4, S, 64], stats: f32[1, 4, S, 1]) {
        let (out, lse) = sdpa(q, k, v, causal = true, training = true, scale = 0.125);
        o = out;
        stats = lse;
    }

    /// Its gradients.
    pub Backward<dyn S>(
        q: bf16[1, 4, S, 64],
        k: bf16[1, 2, S, 64],
        v: bf16[1, 2, S, 64],
        o: bf16[1, 4, S, 64],
        d_o: bf16[1, 4, S, 64],
        stats: f32[1, 4, S, 1],
    ) -> (d_q: bf16[1, 4, S, 64], d_k: bf16[1, 2, S, 64], d_v: bf16[1, 2, S, 64]) {
        let (dq, dk, dv) = sdpa_backward(q, k, v, o, d_o, stats, causal = true, scale = 0.125);
        d_q = dq;
        d_k = dk;
        d_v = dv;
    }

    /// Masks and bias as inputs.
    pub Masked(
        q: bf16[2, 4, 16, 64],
        k: bf16[2, 4, 24, 64],
        v: bf16[2, 4, 24, 64],
        bias: bf16[1, 4, 16, 24],
        seq_q: i32[2, 1, 1, 1],
        seq_kv: i32[2, 1, 1, 1],
    ) -> (o: bf16[2, 4, 16, 64]) {
        o = sdpa(q, k, v, bias, seq_q, seq_kv, bias = true, padding_mask = true, window = 8, causal = true);
    }
}

fn main() {
    let s = 5;
    let data = |n: usize| (0..n).map(|i| bf16::from_f32(((i * 37 % 11) as f32 - 5.0) * 0.1)).collect::<Vec<_>>();
    let (q, k, v) = (data(4 * s * 64), data(2 * s * 64), data(2 * s * 64));
    let fwd = Forward::new(s).reference(ForwardInputs { q: &q, k: &k, v: &v }).unwrap();
    assert_eq!(fwd.o.len(), 4 * s * 64);
    let d_o = data(4 * s * 64);
    let grads = Backward::new(s)
        .reference(BackwardInputs { q: &q, k: &k, v: &v, o: &fwd.o, d_o: &d_o, stats: &fwd.stats })
        .unwrap();
    assert_eq!(grads.d_k.len(), 2 * s * 64);
    let _ = Masked::new();
}
