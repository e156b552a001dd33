use cudnn_graph::graph;

graph! {
    /// A bound on the packed tokens of an attention that packs nothing.
    pub Padded(
        q: bf16[4, 8, 128, 64],
        k: bf16[4, 8, 128, 64],
        v: bf16[4, 8, 128, 64],
    ) -> (o: bf16[4, 8, 128, 64]) {
        o = sdpa(q, k, v, max_total_seq_len_kv = 256);
    }
}

fn main() {}
