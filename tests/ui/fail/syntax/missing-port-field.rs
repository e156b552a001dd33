use cudnn_graph::graph;
use half::f16;

graph! {
    pub AddTwo(x: f16[4], z: f16[4]) -> (y: f16[4]) {
        y = add(x, z);
    }
}

fn main() {
    let x = vec![f16::ONE; 4];
    let _ = AddTwo::new().reference(AddTwoInputs { x: &x, w: &x });
}
