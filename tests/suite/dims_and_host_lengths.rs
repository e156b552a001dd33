//! `graph!` types with runtime dims past what a tensor can address, and typed host buffers of
//! the wrong length: typed errors naming the dim or the port, never a wrapped extent or a
//! silently ignored tail.

use cudnn_graph::{graph, ArgError, GraphError};

graph! {
    /// y = relu(x)
    pub Relu<const C: usize, dyn B>(x: f32[B, C]) -> (y: f32[B, C]) {
        y = relu(x);
    }
}

fn binding_error(e: ArgError) -> GraphError {
    match e {
        ArgError::Binding { source, .. } => *source,
        other => panic!("not a binding error: {other}"),
    }
}

#[test]
fn runtime_dims_past_i64_name_the_dim() {
    // `B as i64` wrapped usize::MAX to -1, reported as tensor `x` having a bad dim.
    let e = binding_error(Relu::<4>::new(usize::MAX).graph().unwrap_err());
    assert_eq!(e, GraphError::DimTooLarge { dim: "B".into(), value: u64::MAX });
    assert_eq!(
        e.to_string(),
        "dim `B` = 18446744073709551615 is larger than i64::MAX, the largest extent a tensor can have"
    );
    // A const generic past i64 likewise.
    let e = binding_error(Relu::<{ usize::MAX }>::new(2).graph().unwrap_err());
    assert_eq!(e, GraphError::DimTooLarge { dim: "C".into(), value: u64::MAX });
    // Within i64 but past the size limit: the tensor is named.
    let e = binding_error(Relu::<1024>::new(1 << 55).graph().unwrap_err());
    assert!(matches!(e, GraphError::TooLarge { ref tensor, .. } if tensor == "x"), "{e}");
    // Serializing such a value is an error, not a wrapped dim.
    assert!(serde_json::to_string(&Relu::<4>::new(usize::MAX)).is_err());
    assert!(serde_json::to_string(&Relu::<4>::new(3)).is_ok());
}

#[test]
fn typed_host_buffers_must_match_the_bound_shape() {
    let g = Relu::<2>::new(4);
    // A buffer for batch 8 where the graph is bound to batch 4.
    let x = vec![1.0f32; 8 * 2];
    let e = g.reference(ReluInputs { x: &x }).unwrap_err();
    assert_eq!(
        e,
        ArgError::Length { tensor: "x".into(), expected: 8, found: 16, dims: vec![4, 2], strides: vec![2, 1] }
    );
    let e = g.reference(ReluInputs { x: &x[..7] }).unwrap_err();
    assert!(matches!(e, ArgError::Length { expected: 8, found: 7, .. }), "{e}");
    let out = g.reference(ReluInputs { x: &[-1.0, 2.0, -3.0, 4.0, 0.5, -0.5, 6.0, -7.0] }).unwrap();
    assert_eq!(out.y, vec![0.0, 2.0, 0.0, 4.0, 0.5, 0.0, 6.0, 0.0]);
}
