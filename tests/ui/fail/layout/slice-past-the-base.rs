use cudnn_graph::graph;

graph! {
    /// V's heads end at 3 * H, the packed projection's last head: `4 * H` reaches past it for
    /// every H.
    pub PastTheBase<const H: usize, const D: usize, dyn B, dyn S>(qkv: bf16[B, S, 3 * H, D]) -> (v: bf16[B, S, 2 * H, D]) {
        v = slice(qkv, start = [0, 0, 2 * H, 0], limit = [B, S, 4 * H, D]);
    }
}

fn main() {}
