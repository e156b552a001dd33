use cudnn_graph::graph;

graph! {
    /// fp8 attention's backward with a bf16 dQ: cuDNN 9.19 writes fp8 attention's gradients in fp8 only on Hopper (a bf16/f16 one needs Blackwell and cuDNN 9.13).
    pub Fp8Backward(
        q: fp8_e4m3[2, 4, 128, 128],
        k: fp8_e4m3[2, 4, 128, 128],
        v: fp8_e4m3[2, 4, 128, 128],
        o: fp8_e4m3[2, 4, 128, 128],
        d_o: fp8_e4m3[2, 4, 128, 128],
        stats: f32[2, 4, 128, 1],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_v: f32[1, 1, 1, 1],
        descale_o: f32[1, 1, 1, 1],
        descale_d_o: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        descale_dp: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_dq: f32[1, 1, 1, 1],
        scale_dk: f32[1, 1, 1, 1],
        scale_dv: f32[1, 1, 1, 1],
        scale_dp: f32[1, 1, 1, 1],
    ) -> (
        dq: bf16[2, 4, 128, 128],
        dk: fp8_e4m3[2, 4, 128, 128],
        dv: fp8_e4m3[2, 4, 128, 128],
        amax_dq: f32[1, 1, 1, 1],
        amax_dk: f32[1, 1, 1, 1],
        amax_dv: f32[1, 1, 1, 1],
        amax_dp: f32[1, 1, 1, 1],
    ) {
        let (g_q, g_k, g_v, a_q, a_k, a_v, a_p) = sdpa_backward(
            q, k, v, o, d_o, stats,
            descale_q, descale_k, descale_v, descale_o, descale_d_o, descale_s, descale_dp, scale_s, scale_dq, scale_dk, scale_dv, scale_dp,
            fp8 = e4m3,
        );
        dq = g_q;
        dk = g_k;
        dv = g_v;
        amax_dq = a_q;
        amax_dk = a_k;
        amax_dv = a_v;
        amax_dp = a_p;
    }
}

fn main() {}
