use cudnn_graph::graph;

graph! {
    /// fp8 attention with head dim 72: cuDNN's fp8 attention needs a multiple of 16.
    pub Fp8HeadDim(
        q: fp8_e4m3[2, 4, 128, 72],
        k: fp8_e4m3[2, 4, 128, 72],
        v: fp8_e4m3[2, 4, 128, 72],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_v: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_o: f32[1, 1, 1, 1],
    ) -> (o: fp8_e4m3[2, 4, 128, 72], amax_s: f32[1, 1, 1, 1], amax_o: f32[1, 1, 1, 1]) {
        let (out, a_s, a_o) = sdpa(q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, fp8 = e4m3);
        o = out;
        amax_s = a_s;
        amax_o = a_o;
    }
}

fn main() {}
