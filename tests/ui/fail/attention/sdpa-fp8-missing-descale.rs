use cudnn_graph::graph;

graph! {
    /// fp8 attention without Descale_V: the call takes all six scale inputs.
    pub Fp8MissingDescale(
        q: fp8_e4m3[2, 4, 128, 128],
        k: fp8_e4m3[2, 4, 128, 128],
        v: fp8_e4m3[2, 4, 128, 128],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_o: f32[1, 1, 1, 1],
    ) -> (o: fp8_e4m3[2, 4, 128, 128], amax_s: f32[1, 1, 1, 1], amax_o: f32[1, 1, 1, 1]) {
        let (out, a_s, a_o) = sdpa(q, k, v, descale_q, descale_k, descale_s, scale_s, scale_o, fp8 = e4m3);
        o = out;
        amax_s = a_s;
        amax_o = a_o;
    }
}

fn main() {}
