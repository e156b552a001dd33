use cudnn_graph::graph;

// `M` against 4 is left to run time (M may be 4); 8 against 4 is an error now.
graph! {
    pub AddBias<dyn M>(x: f32[1, M, 16], bias: f32[1, 4, 16]) -> (y: f32[1, M, 16]) {
        y = add(x, bias);
    }
}

graph! {
    pub AddLit(x: f32[2, 8, 16], bias: f32[1, 4, 16]) -> (y: f32[2, 8, 16]) {
        y = add(x, bias);
    }
}

fn main() {}
