use cudnn_graph::graph;

graph! {
    /// An fp8 matmul computing in f16: fp8 tensor cores accumulate in f32.
    #[compute(f16)]
    pub Fp8InF16(a: fp8_e4m3[1, 64, 32], b: fp8_e5m2[1, 32, 16], descale: f32[1, 1, 1]) -> (y: bf16[1, 64, 16]) {
        y = mul(matmul(a, b), descale);
    }
}

fn main() {}
