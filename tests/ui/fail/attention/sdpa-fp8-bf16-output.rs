use cudnn_graph::graph;

graph! {
    /// fp8 attention with a bf16 O: cuDNN 9.19 writes fp8 attention's O in fp8 only on Hopper
    /// (a bf16/f16 O needs Blackwell and cuDNN 9.13).
    pub Fp8Bf16Out(
        q: fp8_e4m3[2, 4, 128, 128],
        k: fp8_e4m3[2, 4, 128, 128],
        v: fp8_e4m3[2, 4, 128, 128],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_v: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_o: f32[1, 1, 1, 1],
    ) -> (o: bf16[2, 4, 128, 128], amax_s: f32[1, 1, 1, 1], amax_o: f32[1, 1, 1, 1]) {
        let (out, a_s, a_o) = sdpa(q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, fp8 = e4m3);
        o = out;
        amax_s = a_s;
        amax_o = a_o;
    }
}

fn main() {}
