//! Huge and malformed numbers at every entry point (builder, `Graph::validate` on hand-made
//! graphs, the structural JSON reader, the reference engine) are typed errors naming the cause,
//! never a panic (debug builds run these with overflow checks) or a wrapped value (the checks are
//! `checked_*` arithmetic, so release builds reject the same inputs).

use cudnn_runtime::ops::{AttrValue, ShapeErrorKind};
use cudnn_runtime::reference::{self, HostSlice};
use cudnn_runtime::{serialize, ArgError, DataType, Graph, GraphBuilder, GraphError, Node, TensorId};

const BIG: i64 = i64::MAX;

fn attr(name: &str, v: impl Into<AttrValue>) -> (String, AttrValue) {
    (name.to_string(), v.into())
}

fn conv(attrs: &[(String, AttrValue)]) -> Result<Vec<TensorId>, GraphError> {
    let mut g = GraphBuilder::new("c");
    let x = g.input("x", DataType::F16, &[1, 4, 8, 8]).unwrap();
    let w = g.input("w", DataType::F16, &[4, 4, 3, 3]).unwrap();
    g.op("conv_fprop", &[x.into(), w.into()], attrs)
}

fn rule_of(e: &GraphError) -> String {
    match e {
        GraphError::Shape { source, .. } => match &*source.kind {
            ShapeErrorKind::Rule { rule, .. } => rule.clone(),
            other => panic!("not a rule error: {other}"),
        },
        other => panic!("not a shape error: {other}"),
    }
}

#[test]
fn builder_rejects_tensors_past_the_size_limit_naming_the_tensor() {
    let mut g = GraphBuilder::new("big");
    // 2^55 · 2^10 elements: the count overflows i64 (packed strides used to overflow at build).
    let e = g.input("x", DataType::F32, &[1 << 55, 1 << 10]).unwrap_err();
    assert_eq!(
        e,
        GraphError::TooLarge {
            tensor: "x".into(),
            dims: vec![1 << 55, 1 << 10],
            strides: None,
            data_type: DataType::F32
        }
    );
    // 2^62 f32 elements fit an i64 count but not an i64 byte span.
    assert!(matches!(g.input("y", DataType::F32, &[1 << 62]), Err(GraphError::TooLarge { .. })));
    // The largest byte span there is: fine.
    let z = g.input("z", DataType::U8, &[1 << 31, (1 << 31) - 1]).unwrap();
    // Strides whose span overflows (3 · 2^62) name the tensor and its strides.
    let s = g.input("s", DataType::F16, &[4, 2]).unwrap();
    let e = g.set_strides(s, &[1 << 62, 1]).unwrap_err();
    assert_eq!(
        e,
        GraphError::TooLarge {
            tensor: "s".into(),
            dims: vec![4, 2],
            strides: Some(vec![1 << 62, 1]),
            data_type: DataType::F16
        }
    );
    assert!(e.to_string().contains("spans more than i64::MAX bytes"), "{e}");
    let y = g.op("relu", &[z.into()], &[]).unwrap()[0];
    g.output(y, "out", DataType::U8).unwrap();
    g.build().unwrap();
}

#[test]
fn conv_windows_with_huge_padding_stride_or_dilation_are_rule_errors() {
    // i64::MAX padding: `x + pre + post` overflows (it panicked in debug, wrapped in release).
    let e = conv(&[attr("padding", vec![BIG, BIG])]).unwrap_err();
    assert!(rule_of(&e).contains("overflows i64 in spatial dim 0"), "{e}");
    // i64::MAX dilation: `dilation · (R - 1)` overflows; the error names the dilation, not X.
    let e = conv(&[attr("dilation", vec![BIG, 1])]).unwrap_err();
    assert!(rule_of(&e).contains("dilation [9223372036854775807, 1] overflows i64"), "{e}");
    // A huge stride is no overflow: one output position.
    let y = conv(&[attr("stride", vec![BIG, BIG])]).unwrap();
    assert_eq!(y.len(), 1);
    // A huge padding that does not overflow gives an output past the size limit, named.
    let e = conv(&[attr("pre_padding", vec![1 << 40, 1 << 40]), attr("post_padding", vec![0, 0])]).unwrap_err();
    assert!(e.to_string().contains("spans more than i64::MAX bytes"), "{e}");
    assert!(matches!(e, GraphError::TooLarge { ref tensor, .. } if tensor == "conv_fprop_0"), "{e}");
    // dgrad's transposed rule: `(dy - 1) · stride` overflows.
    let mut g = GraphBuilder::new("dgrad");
    let dy = g.input("dy", DataType::F16, &[1, 4, 8, 8]).unwrap();
    let w = g.input("w", DataType::F16, &[4, 4, 3, 3]).unwrap();
    let e = g.op("conv_dgrad", &[dy.into(), w.into()], &[attr("stride", vec![BIG, 1])]).unwrap_err();
    assert!(rule_of(&e).contains("overflows i64"), "{e}");
    // Pooling: the same rule.
    let mut g = GraphBuilder::new("pool");
    let x = g.input("x", DataType::F16, &[1, 4, 8, 8]).unwrap();
    // Padding below a window of i64::MAX: `x + pre` overflows.
    let window = [
        attr("mode", "maxpool"),
        attr("window", vec![BIG, 2]),
        attr("pre_padding", vec![BIG - 1, 0]),
        attr("post_padding", vec![BIG - 1, 0]),
    ];
    let e = g.op("resample", &[x.into()], &window).unwrap_err();
    assert!(rule_of(&e).contains("overflows i64"), "{e}");
}

#[test]
fn slices_with_huge_steps_and_concats_with_huge_extents() {
    // A step of i64::MAX takes one element (`limit - start + step - 1` overflowed).
    let mut g = GraphBuilder::new("slice");
    let x = g.input("x", DataType::F32, &[4, 8]).unwrap();
    let attrs = [attr("start", vec![1, 0]), attr("limit", vec![4, 8]), attr("step", vec![BIG, BIG])];
    let y = g.op("slice", &[x.into()], &attrs).unwrap()[0];
    assert_eq!(g.dims(y), Some(&[1, 1][..]));
    let z = g.op("relu", &[y.into()], &[]).unwrap()[0];
    g.output(z, "z", DataType::F32).unwrap();
    let graph = g.build().unwrap();
    let data: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let out = reference::run(&graph, &[("x", data.as_slice().into())]).unwrap();
    assert_eq!(out[0].data, vec![8.0]);

    // Extents that add up past i64::MAX: an error naming them (they used to saturate to an
    // extent of i64::MAX, which a u8 tensor of that many bytes then fitted).
    let mut g = GraphBuilder::new("concat");
    let a = g.input("a", DataType::U8, &[1, 1 << 62]).unwrap();
    let b = g.input("b", DataType::U8, &[1, 1 << 62]).unwrap();
    let e = g.op("concatenate", &[a.into(), b.into()], &[attr("axis", 1i64)]).unwrap_err();
    assert_eq!(
        rule_of(&e),
        "the inputs' extents along axis 1 (4611686018427387904 + 4611686018427387904) add up to more than i64::MAX"
    );
}

#[test]
fn uids_past_the_limit_are_rejected_where_they_are_set() {
    let mut g = GraphBuilder::new("u");
    let x = g.input("x", DataType::F32, &[2]).unwrap();
    // Lowering numbers its own tensors above the largest uid: i64::MAX left it no room.
    let e = g.set_uid(x, BIG).unwrap_err();
    assert_eq!(e, GraphError::BadUid { tensor: "x".into(), uid: BIG });
    g.set_uid(x, cudnn_runtime::ir::MAX_UID).unwrap();
}

fn relu_graph() -> Graph {
    let mut g = GraphBuilder::new("r");
    let x = g.input("x", DataType::F32, &[2, 3]).unwrap();
    let y = g.op("relu", &[x.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F32).unwrap();
    g.build().unwrap()
}

#[test]
fn hand_made_graphs_are_validated_not_trusted() {
    // A span that wraps in release (`storage_len` wrapped to 2 and cuDNN planned it).
    let mut g = relu_graph();
    g.tensors[0].dims = vec![3, 2];
    g.tensors[0].strides = vec![BIG / 2 + 1, 1];
    g.tensors[1].dims = vec![3, 2];
    assert!(matches!(g.validate(), Err(GraphError::TooLarge { ref tensor, .. }) if tensor == "x"));
    assert_eq!(g.tensors[0].storage_len(), usize::MAX, "a span that overflows is no length any buffer has");

    // A node naming a tensor the graph does not have.
    let mut g = relu_graph();
    g.nodes.push(Node { name: "stray".into(), inputs: vec![TensorId(7)], outputs: vec![], ..g.nodes[0].clone() });
    let fingerprint = g.fingerprint();
    assert_ne!(fingerprint, relu_graph().fingerprint());
    let e = reference::run(&g, &[("x", [1.0f32; 6].as_slice().into())]).unwrap_err();
    assert_eq!(
        e,
        ArgError::Graph {
            graph: "r".into(),
            source: Box::new(GraphError::UnknownTensor { node: "stray".into(), index: 7 })
        }
    );
    let e = reference::run_arrays(&g, vec![None; 2]).unwrap_err();
    assert!(matches!(e, ArgError::Graph { .. }), "{e}");
    // Value slots that do not match the graph.
    let g = relu_graph();
    assert_eq!(
        reference::run_arrays(&g, vec![None]).unwrap_err(),
        ArgError::Slots { graph: "r".into(), expected: 2, found: 1 }
    );
    let wrong = reference::Array::zeros(&[3, 2]);
    let e = reference::run_arrays(&g, vec![Some(wrong), None]).unwrap_err();
    assert!(matches!(e, ArgError::Length { ref tensor, expected: 6, found: 6, .. } if tensor == "x"), "{e}");
    assert!(matches!(reference::run_arrays(&g, vec![None, None]), Err(ArgError::Missing { .. })));
}

#[test]
fn host_buffers_must_have_exactly_the_bound_length() {
    let g = relu_graph();
    let short = [1.0f32; 5];
    let long = [1.0f32; 12];
    for (data, found) in [(&short[..], 5), (&long[..], 12)] {
        let e = reference::run(&g, &[("x", HostSlice::from(data))]).unwrap_err();
        assert_eq!(
            e,
            ArgError::Length { tensor: "x".into(), expected: 6, found, dims: vec![2, 3], strides: vec![3, 1] }
        );
    }
    assert_eq!(
        reference::run(&g, &[("x", [-1.0f32, 2.0, 0.0, 4.0, -5.0, 6.0].as_slice().into())]).unwrap()[0].data,
        vec![0.0, 2.0, 0.0, 4.0, 0.0, 6.0]
    );
}

fn conv_json() -> String {
    let mut g = GraphBuilder::new("c");
    let x = g.input("x", DataType::F16, &[1, 4, 8, 8]).unwrap();
    let w = g.input("w", DataType::F16, &[4, 4, 3, 3]).unwrap();
    let y = g.op("conv_fprop", &[x.into(), w.into()], &[attr("padding", vec![1, 1])]).unwrap()[0];
    g.output(y, "y", DataType::F16).unwrap();
    let json = serialize::structure_to_json(&g.build().unwrap());
    // Without our section the document reads as cudnn-frontend's (no fingerprint to match).
    let ours = json.lines().find(|l| l.contains("\"cudnn_graph\": {\"fingerprint\"")).unwrap();
    json.replace(&format!("{ours}\n"), "")
}

fn read(json: &str, from: &str, to: &str) -> Result<Graph, serialize::SerializeError> {
    assert!(json.contains(from), "{from}");
    serialize::structure_from_json(&json.replacen(from, to, 1))
}

#[test]
fn json_reader_names_the_cause() {
    let json = conv_json();
    serialize::structure_from_json(&json).unwrap();
    // A uid out of range names its tensor (it used to be reported as the node's port referring
    // to a uid no tensor had).
    for uid in [0, -5, BIG] {
        let e = read(&json, "\"uid\": 1", &format!("\"uid\": {uid}")).unwrap_err();
        assert_eq!(e, serialize::SerializeError::Graph(Box::new(GraphError::BadUid { tensor: "x".into(), uid })));
    }
    // A byte span past i64::MAX: 3 · 2^61 elements of f16 (accepted before).
    let e = read(&json, "\"stride\": [256, 64, 8, 1]", "\"stride\": [256, 2305843009213693952, 8, 1]").unwrap_err();
    assert!(
        matches!(&e, serialize::SerializeError::Graph(g) if matches!(**g, GraphError::TooLarge { ref tensor, .. } if tensor == "x")),
        "{e}"
    );
    // Padding of i64::MAX: the window rule's overflow, named (it panicked in debug).
    let e = read(&json, "[1, 1]", "[9223372036854775807, 9223372036854775807]").unwrap_err();
    assert!(e.to_string().contains("overflows i64 in spatial dim 0"), "{e}");
}

#[test]
fn attention_scores_past_i64_are_a_rule_error() {
    // Q, K and V of 2^35 elements each are fine; their [1, 1, 2^32, 2^32] scores are not.
    let mut g = GraphBuilder::new("attn");
    let dims = [1, 1, 1 << 32, 8];
    let [q, k, v] = ["q", "k", "v"].map(|n| g.input(n, DataType::F16, &dims).unwrap());
    let e = g.op("sdpa", &[q.into(), k.into(), v.into()], &[]).unwrap_err();
    assert!(
        rule_of(&e).contains("attention scores [1, 1, 4294967296, 4294967296] of more than i64::MAX elements"),
        "{e}"
    );
    // 2^31 by 2^31 scores fit.
    let mut g = GraphBuilder::new("attn");
    let dims = [1, 1, 1 << 31, 8];
    let [q, k, v] = ["q", "k", "v"].map(|n| g.input(n, DataType::F16, &dims).unwrap());
    g.op("sdpa", &[q.into(), k.into(), v.into()], &[]).unwrap();
}

/// Found by the builder fuzz target (`fuzz/regressions/builder/validate-accepts-rank-over-max-rank`):
/// the builder and `validate` accepted rank 17, whose structural JSON the reader then refused, so
/// a valid graph did not round-trip.
#[test]
fn ranks_over_the_limit_are_refused_by_validate() {
    let dims = vec![1; cudnn_runtime::dim::MAX_RANK + 1];
    let mut g = GraphBuilder::new("deep");
    let x = g.input("x", DataType::F32, &dims).unwrap();
    let y = g.op("relu", &[x.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F32).unwrap();
    let e = g.build().unwrap_err();
    assert_eq!(e, GraphError::RankTooHigh { tensor: "x".into(), rank: 17, max: 16 });
    // Rank 16 builds and round-trips.
    let mut g = GraphBuilder::new("deep");
    let x = g.input("x", DataType::F32, &dims[..16]).unwrap();
    let y = g.op("relu", &[x.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F32).unwrap();
    let graph = g.build().unwrap();
    assert_eq!(serialize::structure_from_json(&serialize::structure_to_json(&graph)).unwrap(), graph);
}
