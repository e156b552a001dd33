//! A host scalar port: given by value, in the reference's inputs as in the device arguments.
use cudnn_graph::graph;

graph! {
    pub Scale(x: f32[4], s: f32[1] host) -> (y: f32[4]) {
        y = mul(x, s);
    }
}

fn main() {
    let out = Scale::new().reference(ScaleInputs { x: &[1.0, 2.0, 3.0, 4.0], s: 0.5 }).unwrap();
    assert_eq!(out.y, [0.5, 1.0, 1.5, 2.0]);
}
