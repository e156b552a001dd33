use cudnn_graph::graph;

graph! {
    /// An fp8 A beside a bf16 B: cuDNN 9.19 has no engine for it.
    pub MixedFp8(a: fp8_e4m3[1, 64, 32], b: bf16[1, 32, 16], descale_a: f32[1, 1, 1]) -> (y: bf16[1, 64, 16]) {
        y = mul(matmul(a, b), descale_a);
    }
}

fn main() {}
