use cudnn_graph::graph;
use half::bf16;

graph! {
    pub Mm<const M: usize>(a: bf16[1, M, 4], b: bf16[1, 5, 16]) -> (c: bf16[1, M, 16]) {
        c = matmul(a, b);
    }
}

// Only the graph's own error is reported: the type, its constructor, its argument structs and
// `reference` still exist, so this code raises no further errors.
fn main() {
    let g = Mm::<8>::new();
    let a = vec![bf16::ZERO; 32];
    let b = vec![bf16::ZERO; 80];
    let _ = g.reference(MmInputs { a: &a, b: &b }).map(|out| out.c.len());
    let _ = Mm::<8>::FINGERPRINT;
}
