use cudnn_graph::graph;

graph! {
    pub A(q: bf16[1, 2, 64, 64], k: bf16[1, 2, 64, 64], v: bf16[1, 2, 64, 64]) -> (o: bf16[1, 2, 64, 64]) {
        o = sdpa(q, k, v, causal = yes);
    }
    pub B(q: bf16[1, 2, 64, 64], k: bf16[1, 2, 64, 64], v: bf16[1, 2, 64, 64]) -> (o: bf16[1, 2, 64, 64]) {
        o = sdpa(q, k, v, alignment = bottom_left, causal = true);
    }
    pub C(q: bf16[1, 2, 64, 64], k: bf16[1, 2, 64, 64], v: bf16[1, 2, 64, 64], seed: i64[1, 1, 1, 1], offset: i64[1, 1, 1, 1]) -> (o: bf16[1, 2, 64, 64]) {
        o = sdpa(q, k, v, seed, offset, dropout = 1.5);
    }
    pub D(q: bf16[1, 2, 64, 64], k: bf16[1, 2, 64, 64], v: bf16[1, 2, 64, 64]) -> (o: bf16[1, 2, 64, 64]) {
        o = sdpa(q, k, v, causal = true, casual = true);
    }
}

fn main() {}
