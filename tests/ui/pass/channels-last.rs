//! `channels_last` ports: the layout every convolution chain declares for cuDNN's fused engines,
//! at ranks 3, 4 and 5, on inputs and outputs alike, and shown in the port's docs.
use cudnn_graph::graph;

graph! {
    pub Conv1d(x: f16[2, 8, 16] channels_last, w: f16[4, 8, 3] channels_last) -> (y: f16[2, 4, 16] channels_last) {
        y = conv_fprop(x, w, padding = [1]);
    }

    pub Conv2d(x: f16[2, 8, 6, 6] channels_last, w: f16[4, 8, 1, 1] channels_last) -> (y: f16[2, 4, 6, 6] channels_last) {
        y = conv_fprop(x, w);
    }

    pub Conv3d(x: f16[2, 8, 3, 4, 5] channels_last, w: f16[4, 8, 1, 1, 1] channels_last)
        -> (y: f16[2, 4, 3, 4, 5] channels_last)
    {
        y = conv_fprop(x, w);
    }
}

fn main() {
    let strides = |g: cudnn_graph::Graph| g.tensor_by_name("y").map(|t| t.strides.clone());
    assert_eq!(strides(Conv1d::new().graph().unwrap()), Some(vec![64, 1, 4]));
    assert_eq!(strides(Conv2d::new().graph().unwrap()), Some(vec![144, 1, 24, 4]));
    assert_eq!(strides(Conv3d::new().graph().unwrap()), Some(vec![240, 1, 80, 20, 4]));
    let x = Conv2d::new().graph().unwrap().tensor_by_name("x").map(|t| t.type_string());
    assert_eq!(x.as_deref(), Some("f16[2, 8, 6, 6] channels-last"));
}
