//! Padded class plans (issue 19), deviceless: which graphs may be padded and how they are
//! masked, how a call binds to its class graph (copies, sequence lengths, every refusal as a
//! typed error), that the masked class graph on padded inputs computes the call's outputs on the
//! CPU reference engine, and that cuDNN 9.19 plans the masked graphs for the H200.

use crate::common;
use crate::padded;

use common::random;
use cudnn_graph::ir::{ClassGraph, PadCopy, PadError};
use cudnn_graph::reference::HostSlice;
use cudnn_graph::{graph, reference, DataType, Graph, GraphBuilder, Operand};
use half::bf16;
use padded::{bshd, Causal, CausalBackward, Cross, LayerNormBackward, LayerNormGelu, RmsResidual};

#[test]
fn the_class_graph_gets_a_padding_mask_and_two_length_inputs_per_attention_node() {
    let class = ClassGraph::new(&Causal::<32>::new(512).graph().unwrap()).unwrap();
    let masked = class.masked();
    let inputs: Vec<_> = masked.inputs().iter().map(|&i| masked.tensor(i).clone()).collect();
    let names: Vec<_> = inputs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names[..3], ["q", "k", "v"]);
    assert_eq!(inputs.len(), 5, "{names:?}");
    for t in &inputs[3..] {
        assert_eq!((t.data_type, t.dims.as_slice()), (DataType::I32, [2, 1, 1, 1].as_slice()), "{}", t.name);
    }
    let cudnn_graph::ops::Op::Sdpa(op) = &masked.nodes[0].op else { panic!("{:?}", masked.nodes[0].op) };
    assert!(op.padding_mask && op.causal && op.training);
    // The class graph's I/O keeps its ids, uids and names; the lengths' uids are fresh.
    let given = Causal::<32>::new(512).graph().unwrap();
    for id in given.io() {
        assert_eq!(given.tensor(id), masked.tensor(id));
    }
    let mut uids: Vec<i64> = masked.tensors.iter().map(|t| t.uid).collect();
    uids.sort_unstable();
    uids.dedup();
    assert_eq!(uids.len(), masked.tensors.len());
    // Every I/O tensor of attention is padded along its sequence axis.
    assert_eq!(class.padded_axes(), [Some(2); 5]);
}

#[test]
fn a_call_binds_its_copies_and_sequence_lengths() {
    let class = ClassGraph::new(&Causal::<32>::new(300).class().unwrap().graph().unwrap()).unwrap();
    assert_eq!(class.class().tensors[0].dims, [2, 4, 512, 32]);
    let call = class.bind(&Causal::<32>::new(300).graph().unwrap()).unwrap();
    assert_eq!(call.seq_lens, [(300, 300)]);
    assert!(!call.is_exact());
    // q: B·H blocks of S·D; stats: B·H blocks of S.
    assert_eq!(call.copies[0], Some(PadCopy { rows: 8, call_row: 300 * 32, class_row: 512 * 32 }));
    assert_eq!(call.copies[1], Some(PadCopy { rows: 4, call_row: 300 * 32, class_row: 512 * 32 }));
    assert_eq!(call.copies[4], Some(PadCopy { rows: 8, call_row: 300, class_row: 512 }));
    assert!(class.bind(&Causal::<32>::new(512).graph().unwrap()).unwrap().is_exact());
    // One position: a decode step's query.
    let one = class.bind(&Causal::<32>::new(16).graph().unwrap()).unwrap();
    assert_eq!(one.seq_lens, [(16, 16)]);

    // BSHD: B blocks of S·H·D.
    let class = ClassGraph::new(&bshd(256, 32)).unwrap();
    let call = class.bind(&bshd(1, 32)).unwrap();
    assert_eq!(call.copies[0], Some(PadCopy { rows: 2, call_row: 4 * 32, class_row: 256 * 4 * 32 }));
    assert_eq!(call.seq_lens, [(1, 1)]);

    // Cross-attention: each length its own.
    let class = ClassGraph::new(&Cross::<32>::new(100, 200).class().unwrap().graph().unwrap()).unwrap();
    let call = class.bind(&Cross::<32>::new(100, 200).graph().unwrap()).unwrap();
    assert_eq!(call.seq_lens, [(100, 200)]);
    assert_eq!(call.copies[0].unwrap().class_row, 128 * 32);
    assert_eq!(call.copies[1].unwrap().class_row, 256 * 32);
}

#[test]
fn calls_the_class_cannot_serve_are_typed_errors_naming_the_tensor() {
    let class = ClassGraph::new(&Causal::<32>::new(256).graph().unwrap()).unwrap();
    let e = class.bind(&Causal::<32>::new(512).graph().unwrap()).unwrap_err();
    assert!(matches!(&e, PadError::Extent { tensor, axis: 2, call: 512, class: 256, .. } if tensor == "q"), "{e:?}");
    assert!(e.to_string().contains("from 1 to its class bound"), "{e}");

    // Another head count: only the sequence axis may differ.
    let mut g = GraphBuilder::new("Causal");
    let q = g.input("q", DataType::BF16, &[2, 8, 100, 32]).unwrap();
    let k = g.input("k", DataType::BF16, &[2, 2, 100, 32]).unwrap();
    let v = g.input("v", DataType::BF16, &[2, 2, 100, 32]).unwrap();
    let attrs = [("causal".into(), true.into()), ("training".into(), true.into())];
    let outs = g.op("sdpa", &[q.into(), k.into(), v.into()], &attrs).unwrap();
    g.output(outs[0], "o", DataType::BF16).unwrap();
    g.output(outs[1], "stats", DataType::F32).unwrap();
    let e = class.bind(&g.build().unwrap()).unwrap_err();
    assert!(matches!(&e, PadError::Structure { .. } | PadError::Extent { axis: 1, .. }), "{e:?}");

    // A call assembled by hand whose output disagrees with its inputs: the graph's own rule.
    let mut bad = Causal::<32>::new(300).graph().unwrap();
    let o = bad.outputs()[0];
    bad.tensors[o.0].dims[2] = 200;
    bad.tensors[o.0].strides = vec![4 * 200 * 32, 200 * 32, 32, 1];
    let e = class.bind(&bad).unwrap_err();
    assert!(matches!(&e, PadError::Graph(_)), "{e:?}");

    // Another graph altogether.
    let e = class.bind(&CausalBackward::<32>::new(128).graph().unwrap()).unwrap_err();
    assert!(matches!(&e, PadError::Structure { .. }), "{e:?}");
    assert!(e.to_string().contains("not the class graph"), "{e}");

    // BSHD class, BHSD call of the same names: the layout is refused.
    let class = ClassGraph::new(&bshd(256, 32)).unwrap();
    let mut g = GraphBuilder::new("bshd");
    let qkv: Vec<Operand> =
        ["q", "k", "v"].iter().map(|n| g.input(n, DataType::BF16, &[2, 4, 100, 32]).unwrap().into()).collect();
    let o = g.op("sdpa", &qkv, &[("causal".into(), true.into())]).unwrap()[0];
    g.output(o, "o", DataType::BF16).unwrap();
    let e = class.bind(&g.build().unwrap()).unwrap_err();
    assert!(matches!(&e, PadError::Layout { tensor, .. } if tensor == "q"), "{e:?}");
}

#[test]
fn graphs_whose_padding_would_leak_are_refused_naming_the_node() {
    graph! {
        pub Gemm<dyn S>(a: bf16[1, S, 8], b: bf16[1, 8, 8]) -> (y: bf16[1, S, 8]) { y = matmul(a, b); }
        pub AttentionRelu<dyn S>(q: bf16[1, 2, S, 32], k: bf16[1, 2, S, 32], v: bf16[1, 2, S, 32]) -> (o: bf16[1, 2, S, 32]) {
            o = relu(sdpa(q, k, v));
        }
        pub Stats<dyn S>(x: f32[S, 8, 1, 1]) -> (sum: f32[1, 8, 1, 1], sq_sum: f32[1, 8, 1, 1]) {
            let (a, b) = genstats(x);
            sum = a;
            sq_sum = b;
        }
        pub AcrossRows<dyn S>(x: f32[S, 8], scale: f32[S, 8], bias: f32[S, 8]) -> (y: f32[S, 8]) {
            y = layernorm(x, scale, bias, 1e-5);
        }
        pub ComputedGradient<dyn S>(dy: f32[S, 8], x: f32[S, 8], scale: f32[1, 8], mean: f32[S, 1], inv_var: f32[S, 1])
            -> (dx: f32[S, 8], dscale: f32[1, 8], dbias: f32[1, 8])
        {
            let (a, b, c) = layernorm_backward(exp(dy), x, scale, mean, inv_var);
            dx = a;
            dscale = b;
            dbias = c;
        }
        pub WithBias<dyn S>(q: bf16[1, 2, S, 32], k: bf16[1, 2, S, 32], v: bf16[1, 2, S, 32], bias: bf16[1, 2, S, S]) -> (o: bf16[1, 2, S, 32]) {
            o = sdpa(q, k, v, bias, bias = true);
        }
        pub BottomRight<dyn S>(q: bf16[1, 2, S, 32], k: bf16[1, 2, S, 32], v: bf16[1, 2, S, 32]) -> (o: bf16[1, 2, S, 32]) {
            o = sdpa(q, k, v, causal = true, alignment = bottom_right);
        }
        pub Windowed<dyn S>(q: bf16[1, 2, S, 32], k: bf16[1, 2, S, 32], v: bf16[1, 2, S, 32]) -> (o: bf16[1, 2, S, 32]) {
            o = sdpa(q, k, v, causal = true, window = 16);
        }
        pub Dropped<dyn S>(q: bf16[1, 2, S, 32], k: bf16[1, 2, S, 32], v: bf16[1, 2, S, 32], seed: i64[1, 1, 1, 1], offset: i64[1, 1, 1, 1]) -> (o: bf16[1, 2, S, 32]) {
            o = sdpa(q, k, v, seed, offset, dropout = 0.1);
        }
        pub Padded<dyn S>(q: bf16[1, 2, S, 32], k: bf16[1, 2, S, 32], v: bf16[1, 2, S, 32], sq: i32[1, 1, 1, 1], skv: i32[1, 1, 1, 1]) -> (o: bf16[1, 2, S, 32]) {
            o = sdpa(q, k, v, sq, skv, padding_mask = true);
        }
    }
    for (graph, op, why) in [
        (Gemm::new(64).graph().unwrap(), "matmul", "it is neither"),
        (AttentionRelu::new(64).graph().unwrap(), "relu", "every node must be attention"),
        (Stats::new(64).graph().unwrap(), "genstats", "batch statistics reduce over the rows"),
        (AcrossRows::new(64).graph().unwrap(), "layernorm", "its SCALE is not 1 along axis 0"),
        (ComputedGradient::new(64).graph().unwrap(), "layernorm_backward", "sum over the rows"),
    ] {
        let e = ClassGraph::new(&graph).unwrap_err();
        assert!(matches!(&e, PadError::NotPaddable { op: o, .. } if *o == op), "{}: {e:?}", graph.name);
        assert!(e.to_string().contains(why), "{}: {e}", graph.name);
    }
    for (graph, what) in [
        (WithBias::new(64).graph().unwrap(), "bias"),
        (BottomRight::new(64).graph().unwrap(), "bottom-right"),
        (Windowed::new(64).graph().unwrap(), "sliding window"),
        (Dropped::new(64).graph().unwrap(), "dropout"),
        (Padded::new(64).graph().unwrap(), "padding mask of its own"),
    ] {
        let e = ClassGraph::new(&graph).unwrap_err();
        assert!(matches!(&e, PadError::Unsupported { node, .. } if node == "o"), "{e:?}");
        assert!(e.to_string().contains(what), "{graph:?}: {e}");
    }
}

/// Runs `graph` on the reference engine with `inputs` (bf16, f32 for `stats`), by name, each
/// in its tensor's memory order; the outputs in theirs.
fn run(graph: &Graph, inputs: &[(&str, Vec<f64>)]) -> Vec<Vec<f64>> {
    let typed: Vec<(&str, Typed)> = inputs
        .iter()
        .map(|(name, v)| {
            let t = graph.tensor_by_name(name).unwrap();
            let data = match t.data_type {
                DataType::BF16 => Typed::Bf16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
                DataType::F32 => Typed::F32(v.iter().map(|&x| x as f32).collect()),
                DataType::I32 => Typed::I32(v.iter().map(|&x| x as i32).collect()),
                other => panic!("{other}"),
            };
            (*name, data)
        })
        .collect();
    let slices: Vec<(&str, HostSlice<'_>)> = typed
        .iter()
        .map(|(n, t)| {
            let s: HostSlice<'_> = match t {
                Typed::Bf16(v) => v.into(),
                Typed::F32(v) => v.into(),
                Typed::I32(v) => v.into(),
            };
            (*n, s)
        })
        .collect();
    // Each output as its memory holds it (the reference's arrays are logical), as the copies
    // address it.
    let outputs = reference::run(graph, &slices).unwrap();
    graph.outputs().into_iter().zip(outputs).map(|(id, a)| reference::scatter::<f64>(graph.tensor(id), &a)).collect()
}

enum Typed {
    Bf16(Vec<bf16>),
    F32(Vec<f32>),
    I32(Vec<i32>),
}

/// The masked class graph run on the call's inputs padded with `fill`, its outputs cut back,
/// against the call's own graph: the same values.
fn padded_matches_exact(call: &Graph, class: &Graph, seed: u64, fill: f64) {
    let class = ClassGraph::new(class).unwrap();
    let binding = class.bind(call).unwrap();
    let masked = class.masked();
    let ins = call.inputs();
    let mut exact_inputs = Vec::new();
    let mut padded_inputs = Vec::new();
    for (i, &id) in ins.iter().enumerate() {
        let t = call.tensor(id);
        let n = t.element_count() as usize;
        // Statistics are log-sum-exps: keep them in a range softmax can come from.
        let data: Vec<f64> = random::<f64>(seed + i as u64, n).into_iter().map(|x| x + 1.0).collect();
        let class_data = match binding.copies[i] {
            Some(copy) => {
                let mut class_data = vec![0.0; copy.rows * copy.class_row];
                copy.pad_host(&data, &mut class_data, fill);
                class_data
            }
            None => data.clone(),
        };
        padded_inputs.push((t.name.clone(), class_data));
        exact_inputs.push((t.name.clone(), data));
    }
    for (&(seq_q, seq_kv), (q_in, kv_in)) in binding.seq_lens.iter().zip(class.seq_len_inputs()) {
        let b = masked.tensor(q_in).dims[0] as usize;
        padded_inputs.push((masked.tensor(q_in).name.clone(), vec![seq_q as f64; b]));
        padded_inputs.push((masked.tensor(kv_in).name.clone(), vec![seq_kv as f64; b]));
    }
    let exact_in: Vec<(&str, Vec<f64>)> = exact_inputs.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    let padded_in: Vec<(&str, Vec<f64>)> = padded_inputs.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    let want = run(call, &exact_in);
    let got = run(masked, &padded_in);
    for (k, (w, g)) in want.iter().zip(&got).enumerate() {
        let cut = match binding.copies[ins.len() + k] {
            Some(copy) => {
                let mut cut = vec![0.0; w.len()];
                copy.unpad_host(g, &mut cut);
                cut
            }
            None => g.clone(),
        };
        let err = common::relative_error(&cut, w);
        let name = &call.tensor(call.outputs()[k]).name;
        println!("{}: {name} relative error {err:.2e} ({} values)", call.name, w.len());
        assert!(err <= 1e-12, "{}: {name}: {err}", call.name);
    }
}

/// Poison for what the mask must hide: the padding holds large values, never read.
const POISON: f64 = 1e4;

#[test]
fn the_masked_class_graph_on_padded_inputs_computes_the_call() {
    for s in [1, 3, 17, 100, 128] {
        let call = Causal::<32>::new(s).graph().unwrap();
        let class = Causal::<32>::new(s).class().unwrap().graph().unwrap();
        padded_matches_exact(&call, &class, 10 + s as u64, POISON);
        if s == 1 {
            continue; // cuDNN's backward refuses S_q = S_kv = 1 (the graph's own rule)
        }
        let call = CausalBackward::<32>::new(s).graph().unwrap();
        let class = CausalBackward::<32>::new(s).class().unwrap().graph().unwrap();
        padded_matches_exact(&call, &class, 20 + s as u64, POISON);
    }
    padded_matches_exact(&bshd(70, 32), &bshd(128, 32), 3, POISON);
    let call = Cross::<32>::new(5, 130).graph().unwrap();
    padded_matches_exact(&call, &Cross::<32>::new(5, 130).class().unwrap().graph().unwrap(), 4, POISON);
}

#[test]
fn row_wise_class_graphs_on_padded_rows_compute_the_call() {
    for t in [1, 3, 100, 128, 1000] {
        // Forward rows are computed apart: whatever the padding holds never reaches the call's.
        let call = LayerNormGelu::<64>::new(t).graph().unwrap();
        let class = LayerNormGelu::<64>::new(t).class().unwrap().graph().unwrap();
        padded_matches_exact(&call, &class, 30 + t as u64, POISON);
        let call = RmsResidual::<64>::new(t).graph().unwrap();
        let class = RmsResidual::<64>::new(t).class().unwrap().graph().unwrap();
        padded_matches_exact(&call, &class, 40 + t as u64, POISON);
        // DSCALE and DBIAS sum over the rows: the zeros a padded plan keeps there add nothing.
        let call = LayerNormBackward::<64>::new(t).graph().unwrap();
        let class = LayerNormBackward::<64>::new(t).class().unwrap().graph().unwrap();
        padded_matches_exact(&call, &class, 50 + t as u64, 0.0);
    }
    // The other row-wise norms: instance norm (per sample and channel) forward and backward,
    // batch norm inference (given statistics) and RMS norm's backward.
    graph! {
        pub Instance<dyn T: 1..=64 pow2>(x: f32[T, 8, 4, 4], scale: f32[1, 8, 1, 1], bias: f32[1, 8, 1, 1])
            -> (y: f32[T, 8, 4, 4], mean: f32[T, 8, 1, 1], inv_var: f32[T, 8, 1, 1])
        {
            let (a, b, c) = instancenorm(x, scale, bias, 1e-5, phase = training);
            y = a;
            mean = b;
            inv_var = c;
        }
        pub InstanceBackward<dyn T: 1..=64 pow2>(
            dy: f32[T, 8, 4, 4], x: f32[T, 8, 4, 4], scale: f32[1, 8, 1, 1], mean: f32[T, 8, 1, 1], inv_var: f32[T, 8, 1, 1],
        ) -> (dx: f32[T, 8, 4, 4], dscale: f32[1, 8, 1, 1], dbias: f32[1, 8, 1, 1]) {
            let (a, b, c) = instancenorm_backward(dy, x, scale, mean, inv_var);
            dx = a;
            dscale = b;
            dbias = c;
        }
        pub BatchInference<dyn T: 1..=64 pow2>(
            x: f32[T, 8, 4, 4], mean: f32[1, 8, 1, 1], inv_var: f32[1, 8, 1, 1], scale: f32[1, 8, 1, 1], bias: f32[1, 8, 1, 1],
        ) -> (y: f32[T, 8, 4, 4]) {
            y = relu(batchnorm_inference(x, mean, inv_var, scale, bias));
        }
        pub RmsBackward<dyn T: 1..=64 pow2>(dy: f32[T, 16], x: f32[T, 16], scale: f32[1, 16], inv_var: f32[T, 1])
            -> (dx: f32[T, 16], dscale: f32[1, 16])
        {
            let (a, b) = rmsnorm_backward(dy, x, scale, inv_var);
            dx = a;
            dscale = b;
        }
    }
    for t in [1, 5, 33] {
        // (the call, its class graph, the padding: zeros where a backward norm sums the rows)
        let cases = [
            (Instance::new(t).graph(), Instance::new(t).class().unwrap().graph(), POISON),
            (InstanceBackward::new(t).graph(), InstanceBackward::new(t).class().unwrap().graph(), 0.0),
            (BatchInference::new(t).graph(), BatchInference::new(t).class().unwrap().graph(), POISON),
            (RmsBackward::new(t).graph(), RmsBackward::new(t).class().unwrap().graph(), 0.0),
        ];
        for (k, (call, class, fill)) in cases.into_iter().enumerate() {
            padded_matches_exact(&call.unwrap(), &class.unwrap(), 60 + 10 * k as u64 + t as u64, fill);
        }
    }

    // Outputs come in the order their tensors were made: the norm's statistics before the GELU.
    let g = LayerNormGelu::<64>::new(8).graph().unwrap();
    let names: Vec<&str> = g.outputs().into_iter().map(|o| g.tensor(o).name.as_str()).collect();
    assert_eq!(names, ["mean", "inv_var", "y"]);

    // Rows, not masks: the class graph is the graph itself, its parameters bound as they are.
    let class = ClassGraph::new(&LayerNormBackward::<64>::new(512).graph().unwrap()).unwrap();
    assert_eq!(class.masked(), class.class());
    assert_eq!(class.padded_axes(), [Some(0), Some(0), None, Some(0), Some(0), Some(0), None, None]);
    let call = class.bind(&LayerNormBackward::<64>::new(300).graph().unwrap()).unwrap();
    assert_eq!(call.copies[0], Some(PadCopy { rows: 1, call_row: 300 * 64, class_row: 512 * 64 }));
    assert_eq!(call.copies[3], Some(PadCopy { rows: 1, call_row: 300, class_row: 512 }));
    assert!(call.seq_lens.is_empty());
    let e = class.bind(&LayerNormBackward::<64>::new(513).graph().unwrap()).unwrap_err();
    assert!(matches!(&e, PadError::Extent { tensor, axis: 0, call: 513, class: 512, .. } if tensor == "dy"), "{e:?}");
}

#[test]
fn pad_and_unpad_on_host_round_trip() {
    let copy = PadCopy { rows: 3, call_row: 2, class_row: 5 };
    let call = [1, 2, 3, 4, 5, 6];
    let mut class = [9; 15];
    copy.pad_host(&call, &mut class, 0);
    assert_eq!(class, [1, 2, 0, 0, 0, 3, 4, 0, 0, 0, 5, 6, 0, 0, 0]);
    let mut back = [0; 6];
    copy.unpad_host(&class, &mut back);
    assert_eq!(back, call);
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn cudnn_plans_the_masked_class_graphs_deviceless() {
    use cudnn_graph::backend::{BackendError, BuildOptions, ExecutionPlan, PaddedPlan};
    use cudnn_graph::engines::{PlanCache, PlanKey, ServeReason, Specialization};
    use cudnn_graph::payload::plan::Expect;
    use std::sync::Arc;
    let Some(cudnn) = common::deviceless() else { return };
    for class in [
        Causal::<32>::new(512).graph().unwrap(),
        CausalBackward::<32>::new(512).graph().unwrap(),
        bshd(1024, 32),
        Cross::<32>::new(64, 256).graph().unwrap(),
        LayerNormGelu::<4096>::new(4096).graph().unwrap(),
        LayerNormBackward::<4096>::new(4096).graph().unwrap(),
        RmsResidual::<4096>::new(4096).graph().unwrap(),
    ] {
        let masked = ClassGraph::new(&class).unwrap().masked().clone();
        let plan = ExecutionPlan::build(&cudnn, &masked, &BuildOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", class.name));
        println!("{}: {:?}, {} parts", class.name, plan.selected(), plan.parts().len());
    }
    // The padded buffers need a device.
    let options = BuildOptions::default();
    let class = Causal::<32>::new(512).graph().unwrap();
    let e = PaddedPlan::build(&cudnn, &class, &options).unwrap_err();
    assert!(matches!(e, BackendError::NotOnline { .. }), "{e:?}");

    // A plan made before: of the masked graph it is taken (then the buffers need the device); of
    // the class graph without its masks it is refused by name.
    let graph = ClassGraph::new(&class).unwrap();
    let unmasked = Arc::new(ExecutionPlan::build(&cudnn, &class, &options).unwrap());
    let e = PaddedPlan::from_plan(&cudnn, graph.clone(), unmasked).unwrap_err();
    assert!(matches!(&e, BackendError::Padding(p) if matches!(**p, PadError::PlanMismatch { .. })), "{e:?}");
    assert!(e.to_string().contains("not for its masked class graph"), "{e}");
    let masked = Arc::new(ExecutionPlan::build(&cudnn, graph.masked(), &options).unwrap());
    let e = PaddedPlan::from_plan(&cudnn, graph.clone(), masked).unwrap_err();
    assert!(matches!(e, BackendError::NotOnline { .. }), "{e:?}");

    // Through a plan cache: the masked graph's plan is built once and stored (the padded
    // buffers still need the device), and found again from then on.
    let cache = PlanCache::in_memory();
    let e = cache.padded_plan(&cudnn, &class, &Expect::default(), &options).unwrap_err();
    assert!(matches!(e, cudnn_graph::Error::Backend(BackendError::NotOnline { .. })), "{e:?}");
    assert_eq!(cache.stats().builds, 1);
    let (found, _) = cache.get(&cudnn, graph.masked(), &Expect::default(), &options);
    assert!(found.is_some_and(|(plan, _)| plan.graph() == graph.masked()));
    let e = cache.padded_plan(&cudnn, &Causal::<32>::new(512).graph().unwrap(), &Expect::default(), &options);
    assert!(e.is_err());
    assert_eq!(cache.stats().builds, 1, "the class plan is built once");

    // A lazy cache (dynamic shapes on) still builds class plans specialized to their bound: a
    // class plan serves every length for as long as it lives, so a dynamic-shape plan (which
    // cuDNN 9.19 makes for a layer norm) would only cost device time, and a later swap of it
    // could not reach the padded plan holding it. `class_plan` takes the same entry.
    let cache = Arc::new(PlanCache::in_memory().specialization(Specialization::Lazy));
    let class = LayerNormGelu::<4096>::new(4096).graph().unwrap();
    let graph = ClassGraph::new(&class).unwrap();
    let e = cache.class_plan(&cudnn, &class, &Expect::default(), &options).unwrap_err();
    assert!(matches!(e, cudnn_graph::Error::Backend(BackendError::NotOnline { .. })), "{e:?}");
    let key = PlanKey::new(&cudnn, graph.masked(), &Expect::default());
    let serving = cache.serving(&key).unwrap();
    assert_eq!((serving.dynamic_shape, serving.reason), (Some(false), ServeReason::Specialized));
    assert!(cache.padded_plan(&cudnn, &class, &Expect::default(), &options).is_err());
    assert_eq!((cache.stats().builds, cache.stats().specializations_queued), (1, 0));
}
