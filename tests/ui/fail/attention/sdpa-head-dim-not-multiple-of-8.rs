use cudnn_graph::graph;

graph! {
    pub Odd(q: f16[1, 2, 64, 36], k: f16[1, 2, 64, 36], v: f16[1, 2, 64, 36]) -> (o: f16[1, 2, 64, 36]) {
        o = sdpa(q, k, v);
    }
}

fn main() {}
