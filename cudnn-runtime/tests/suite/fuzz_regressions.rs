//! Regression tests for what fuzzing found (`fuzz/README.md`), one per defect, each with the
//! minimized input or the graph it came from.

use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::serialize::{structure_from_json, structure_to_json};
use cudnn_runtime::{DataType, Graph, GraphBuilder};

fn attr(name: &str, v: impl Into<AttrValue>) -> (String, AttrValue) {
    (name.to_string(), v.into())
}

/// Writes, reads back, and checks the graph, its fingerprint and the bytes are unchanged.
fn round_trip(g: &Graph) {
    let text = structure_to_json(g);
    let back = structure_from_json(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(&back, g);
    assert_eq!(back.fingerprint(), g.fingerprint());
    assert_eq!(structure_to_json(&back), text);
}

/// A convolution with every attribute left to its default (`conv_fprop(x, w)`) read back from
/// its structural JSON as one with the defaults spelled out (`pre_padding = [0, 0]`, ...): another
/// op, so the document's fingerprint did not match and the graph did not read at all. Found by
/// the fuzz seed generator's round-trip check (`cudnn_graph_fuzz::check_graph`).
#[test]
fn convolution_with_default_attributes_round_trips() {
    let mut g = GraphBuilder::new("conv_concat");
    let x = g.input("x", DataType::F16, &[2, 8, 4, 4]).unwrap();
    let w = g.input("w", DataType::F16, &[16, 8, 1, 1]).unwrap();
    let c = g.op("conv_fprop", &[x.into(), w.into()], &[]).unwrap()[0];
    let y0 = g.input("y0", DataType::F16, &[2, 16, 4, 4]).unwrap();
    let y = g.op("concatenate", &[c.into(), y0.into()], &[attr("axis", 1), attr("in_place_index", 1)]).unwrap()[0];
    g.output(y, "y", DataType::F16).unwrap();
    let g = g.build().unwrap();
    round_trip(&g);
}

/// The builder accepted `conv_wgrad` without its required `filter` (an empty list defaulted to
/// 1s), so the graph's own structural JSON did not read back ("needs the attribute `filter`").
/// Found by the `builder` fuzz target; now a rule error naming the attribute, and the graph with
/// a filter round-trips.
#[test]
fn conv_wgrad_without_a_filter_is_refused_by_the_builder() {
    let mut g = GraphBuilder::new("wgrad");
    let x = g.input("x", DataType::F32, &[2, 4, 6, 6]).unwrap();
    let dy = g.input("dy", DataType::F32, &[2, 8, 3, 3]).unwrap();
    let conv = [attr("stride", vec![2, 2]), attr("padding", vec![1, 1])];
    let e = g.op("conv_wgrad", &[x.into(), dy.into()], &conv).unwrap_err();
    assert!(e.to_string().contains("needs the attribute `filter`"), "{e}");
    let with_filter = [attr("stride", vec![2, 2]), attr("padding", vec![1, 1]), attr("filter", vec![3, 3])];
    let dw = g.op("conv_wgrad", &[x.into(), dy.into()], &with_filter).unwrap()[0];
    g.output(dw, "dw", DataType::F32).unwrap();
    round_trip(&g.build().unwrap());
}

/// A concatenation whose ninth input has the wrong rank tripped a debug assertion that no op has
/// more than 8 ports (a concatenation has up to 32) instead of returning the rank error. Found by
/// the `builder` fuzz target in CI.
#[test]
fn concatenation_errors_name_ports_past_the_eighth() {
    let mut g = GraphBuilder::new("concat");
    let mut inputs: Vec<_> =
        (0..9).map(|i| g.input(&format!("x{i}"), DataType::F32, &[2, 3]).unwrap().into()).collect();
    inputs.push(g.input("bad", DataType::F32, &[2, 3, 1]).unwrap().into());
    let e = g.op("concatenate", &inputs, &[attr("axis", 0)]).unwrap_err();
    assert!(e.to_string().contains("X[9]"), "{e}");
}

/// One tensor read as Q, K and V of a composite attention, with unit stride on dim 2 (valid: the
/// CPU engine runs it; cuDNN refuses such strides by name). The structural reader took K's
/// strides for those cudnn-frontend's lowering leaves and swapped the tensor's last two dims back,
/// for Q and V too, so the graph's own JSON read back as another shape ("tensor `out1` is declared
/// [1, 2, 8, 16] but node `sdpa_0` produces [1, 2, 16, 8]"). Found by the `builder` fuzz target
/// in CI (`fuzz/regressions/builder/sdpa-one-tensor-as-q-k-v-with-lowered-strides`); a document
/// cudnn-graph wrote is now read as written.
#[test]
fn attention_over_one_tensor_with_unit_stride_on_dim_2_round_trips() {
    for strides in [[256, 128, 1, 8], [16, 8, 1, 106]] {
        let mut g = GraphBuilder::new("one_tensor_attention");
        let x = g.input("x", DataType::BF16, &[1, 2, 8, 16]).unwrap();
        g.set_strides(x, &strides).unwrap();
        let o = g.op("sdpa", &[x.into(), x.into(), x.into()], &[attr("causal", true)]).unwrap()[0];
        g.output(o, "o", DataType::BF16).unwrap();
        let copy = g.op("identity", &[x.into()], &[]).unwrap()[0];
        g.output(copy, "copy", DataType::F32).unwrap();
        let g = g.build().unwrap();
        round_trip(&g);
    }
}
