use cudnn_graph::graph;

graph! {
    pub Scale(x: bf16[4]) -> (y: bf16[4]) {
        y = mul(x, 0.5);
    }
}

fn main() {
    let x = vec![1.0f32; 4];
    let _ = Scale::new().reference(ScaleInputs { x: &x });
}
