//! Tests of the attention op: attributes and ports, shape rules, the reference against finite
//! differences, and the composite subgraph run on the CPU against the reference.

use super::composite::{self, Expansion, Kind, SubOp};
use super::*;
use crate::array::Array;
use crate::cudnn::Port;
use crate::dim::{Concrete, SymDim, Symbolic};
use crate::ops::{Op, OutputMeta, Pointwise, PointwiseMode, ReductionMode};

fn op(name: &str, attrs: &[(&str, AttrValue)]) -> Sdpa {
    let attrs: Vec<(String, AttrValue)> = attrs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    match Op::from_call(name, &attrs).unwrap() {
        Op::Sdpa(s) => s,
        other => panic!("{other:?}"),
    }
}

fn meta(dims: &[i64], dtype: DataType) -> TensorMeta<i64> {
    TensorMeta { dims: dims.to_vec(), dtype }
}

/// A small deterministic generator (xorshift64*), values in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (v >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    fn array(&mut self, dims: &[i64]) -> Array {
        Array::from_fn(dims, |_| self.next())
    }

    fn below(&mut self, n: usize) -> usize {
        ((self.next() + 1.0) * 0.5 * n as f64) as usize % n.max(1)
    }
}

#[test]
fn attributes_decide_ports() {
    let plain = op("sdpa", &[]);
    assert_eq!(plain.outputs(), ["O"]);
    let names = |s: &Sdpa| s.inputs().iter().map(|p| p.name).collect::<Vec<_>>();
    assert_eq!(names(&plain), ["Q", "K", "V"]);
    let all = op(
        "sdpa",
        &[
            ("scale_tensor", true.into()),
            ("bias", true.into()),
            ("padding_mask", true.into()),
            ("dropout", 0.1.into()),
            ("training", true.into()),
        ],
    );
    assert_eq!(names(&all), ["Q", "K", "V", "Attn_scale", "Bias", "SEQ_LEN_Q", "SEQ_LEN_KV", "Seed", "Offset"]);
    assert_eq!(all.outputs(), ["O", "Stats"]);
    let bwd = op("sdpa_backward", &[("bias", true.into()), ("d_bias", true.into())]);
    assert_eq!(names(&bwd), ["Q", "K", "V", "O", "dO", "Stats", "Bias"]);
    assert_eq!(bwd.outputs(), ["dQ", "dK", "dV", "dBias"]);
    assert_eq!(Op::Sdpa(bwd.clone()).inputs().len(), 7);
    let e = Op::from_call("sdpa", &[("training".into(), 1.0.into())]).unwrap_err();
    assert_eq!(e.to_string(), "attribute `training` of `sdpa` must be `true` or `false`");
    let e = Op::from_call("sdpa_backward", &[("training".into(), true.into())]).unwrap_err();
    assert!(e.to_string().contains("has no attribute `training`"), "{e}");
    let e = Op::from_call("sdpa_backward", &[("implementation".into(), "fused".into())]).unwrap_err();
    assert_eq!(e.to_string(), "attribute `implementation` of `sdpa_backward` must be one of `auto`, `composite`");
}

#[test]
fn call_attributes_round_trip() {
    let cases: Vec<Vec<(&str, AttrValue)>> = vec![
        vec![],
        vec![("scale", 0.125.into()), ("causal", true.into()), ("alignment", "bottom_right".into())],
        vec![("window", 64.into()), ("bias", true.into()), ("dropout", 0.25.into()), ("training", true.into())],
        vec![("scale_tensor", true.into()), ("padding_mask", true.into()), ("implementation", "composite".into())],
    ];
    for attrs in cases {
        let o = Op::Sdpa(op("sdpa", &attrs));
        assert_eq!(Op::from_call("sdpa", &o.call_attrs()).unwrap(), o);
    }
    let b = Op::Sdpa(op(
        "sdpa_backward",
        &[("d_bias", true.into()), ("bias", true.into()), ("deterministic", true.into())],
    ));
    assert_eq!(Op::from_call("sdpa_backward", &b.call_attrs()).unwrap(), b);
}

fn qkv(b: i64, h_q: i64, h_kv: i64, s_q: i64, s_kv: i64, d: i64) -> Vec<TensorMeta<i64>> {
    vec![
        meta(&[b, h_q, s_q, d], DataType::BF16),
        meta(&[b, h_kv, s_kv, d], DataType::BF16),
        meta(&[b, h_kv, s_kv, d], DataType::BF16),
    ]
}

fn infer(s: &Sdpa, inputs: &[TensorMeta<i64>]) -> Result<Vec<OutputMeta<i64>>, ShapeError> {
    Op::Sdpa(s.clone()).infer(inputs, &mut Concrete)
}

#[test]
fn forward_shapes() {
    let s = op("sdpa", &[("training", true.into())]);
    let out = infer(&s, &qkv(2, 8, 2, 100, 37, 64)).unwrap();
    assert_eq!(out[0].dims, [2, 8, 100, 64]);
    assert_eq!(out[0].dtype, None);
    assert_eq!(out[1].dims, [2, 8, 100, 1]);
    assert_eq!(out[1].dtype, Some(DataType::F32));
    // D_v may differ from D_qk.
    let mut ins = qkv(1, 4, 4, 16, 16, 64);
    ins[2].dims[3] = 128;
    assert_eq!(infer(&op("sdpa", &[]), &ins).unwrap()[0].dims, [1, 4, 16, 128]);
}

#[test]
fn forward_shape_errors_name_the_rule() {
    let plain = op("sdpa", &[]);
    let err = |s: &Sdpa, ins: &[TensorMeta<i64>]| infer(s, ins).unwrap_err();
    let mut ins = qkv(2, 8, 8, 16, 16, 64);
    ins[1].dims[3] = 32;
    let e = err(&plain, &ins);
    assert_eq!(e.arg, Some(1));
    assert_eq!(
        e.to_string(),
        "`sdpa`: head dims differ: Q is [2, 8, 16, 64] and K is [2, 8, 16, 32], so Q[3] = 64 must equal K[3] = 32"
    );
    let e = err(&plain, &qkv(2, 8, 3, 16, 16, 64));
    assert!(e.to_string().contains("Q's heads must be a multiple of K's"), "{e}");
    let mut ins = qkv(2, 8, 8, 16, 16, 64);
    ins[2].dims[0] = 3;
    assert!(err(&plain, &ins).to_string().contains("batch sizes differ"));
    let mut ins = qkv(2, 8, 8, 16, 16, 64);
    ins[2].dims[2] = 17;
    assert!(err(&plain, &ins).to_string().contains("sequence lengths differ"));
    let e = err(&plain, &qkv(2, 8, 8, 16, 16, 36));
    assert!(e.to_string().contains("needs a multiple of 8"), "{e}");
    let mut ins = qkv(2, 8, 8, 16, 16, 64);
    ins[1].dtype = DataType::F16;
    assert!(err(&plain, &ins).to_string().contains("port K is f16 but Q is bf16"));
    let mut ins = qkv(2, 8, 8, 16, 16, 64);
    ins.iter_mut().for_each(|t| t.dtype = DataType::F32);
    assert!(matches!(*err(&plain, &ins).kind, ShapeErrorKind::DType { port: "Q", .. }));
    let ins = vec![
        meta(&[8, 16, 64], DataType::BF16),
        meta(&[2, 8, 16, 64], DataType::BF16),
        meta(&[2, 8, 16, 64], DataType::BF16),
    ];
    assert!(matches!(*err(&plain, &ins).kind, ShapeErrorKind::Rank { port: "Q", .. }));
    // Arity follows the attributes.
    let e = err(&op("sdpa", &[("bias", true.into())]), &qkv(2, 8, 8, 16, 16, 64));
    assert!(matches!(*e.kind, ShapeErrorKind::Arity { expected: 4, found: 3, .. }), "{e}");
}

#[test]
fn mask_arguments_are_checked() {
    let with = |attrs: &[(&str, AttrValue)], extra: Vec<TensorMeta<i64>>| {
        let mut ins = qkv(2, 8, 8, 16, 32, 64);
        ins.extend(extra);
        infer(&op("sdpa", attrs), &ins)
    };
    let bias = [("bias", AttrValue::Bool(true))];
    assert!(with(&bias, vec![meta(&[1, 1, 16, 32], DataType::F32)]).is_ok());
    assert!(with(&bias, vec![meta(&[2, 8, 16, 32], DataType::BF16)]).is_ok());
    let e = with(&bias, vec![meta(&[1, 1, 32, 16], DataType::F32)]).unwrap_err();
    assert_eq!(e.arg, Some(3));
    assert_eq!(
        e.to_string(),
        "`sdpa`: port Bias must be [1 or B, 1 or H_q, S_q, S_kv] = [1|2, 1|8, 16, 32], found [1, 1, 32, 16]"
    );
    assert!(with(&bias, vec![meta(&[1, 1, 16, 32], DataType::Bool)]).is_err());
    let pad = [("padding_mask", AttrValue::Bool(true))];
    let lens = || vec![meta(&[2, 1, 1, 1], DataType::I32), meta(&[2, 1, 1, 1], DataType::I32)];
    assert!(with(&pad, lens()).is_ok());
    let e = with(&pad, vec![meta(&[2, 1, 1, 1], DataType::I32), meta(&[1, 1, 1, 1], DataType::I32)]).unwrap_err();
    assert!(e.to_string().contains("port SEQ_LEN_KV must be [B, 1, 1, 1] = [2, 1, 1, 1], found [1, 1, 1, 1]"), "{e}");
    let e = with(&pad, vec![meta(&[2, 1, 1, 1], DataType::I64), meta(&[2, 1, 1, 1], DataType::I32)]).unwrap_err();
    assert!(e.to_string().contains("port SEQ_LEN_Q is i64 but must be i32"), "{e}");
    let drop = [("dropout", AttrValue::Float(0.1))];
    assert!(with(&drop, vec![meta(&[1, 1, 1, 1], DataType::I64), meta(&[1, 1, 1, 1], DataType::I64)]).is_ok());
    let scale = [("scale_tensor", AttrValue::Bool(true))];
    assert!(with(&scale, vec![meta(&[1, 1, 1, 1], DataType::F32)]).is_ok());
    assert!(with(&scale, vec![meta(&[1, 1, 1, 1], DataType::BF16)]).is_err());
}

#[test]
fn attribute_rules() {
    let rule = |attrs: &[(&str, AttrValue)]| {
        let s = op("sdpa", attrs);
        let mut ins = qkv(1, 2, 2, 16, 16, 64);
        ins.extend(s.inputs().iter().skip(3).map(|_| meta(&[1, 1, 1, 1], DataType::I64)));
        infer(&s, &ins).unwrap_err().to_string()
    };
    let mut ins = qkv(1, 2, 2, 16, 16, 64);
    ins.push(meta(&[1, 1, 1, 1], DataType::F32));
    let both = op("sdpa", &[("scale", 0.5.into()), ("scale_tensor", true.into())]);
    assert!(infer(&both, &ins).unwrap_err().to_string().contains("not both"));
    assert!(rule(&[("window", 0.into())]).contains("at least 1 key"));
    assert!(rule(&[("alignment", "bottom_right".into())]).contains("add `causal = true`"));
    assert!(rule(&[("dropout", 1.0.into())]).contains("in (0, 1)"));
    assert!(rule(&[("dropout", 0.0.into())]).contains("in (0, 1)"));
    let e =
        infer(&op("sdpa", &[("causal", true.into()), ("alignment", "bottom_right".into())]), &qkv(1, 2, 2, 32, 16, 64));
    assert!(e.unwrap_err().to_string().contains("S_q = 32 > S_kv = 16"));
    let e = op("sdpa_backward", &[("d_bias", true.into())]).check_attributes().unwrap_err();
    assert!(e.to_string().contains("`d_bias = true` needs the bias"), "{e}");
}

#[test]
fn backward_shapes() {
    let s = op("sdpa_backward", &[("bias", true.into()), ("d_bias", true.into())]);
    let mut ins = qkv(2, 8, 2, 64, 48, 64);
    ins.push(meta(&[2, 8, 64, 64], DataType::BF16));
    ins.push(meta(&[2, 8, 64, 64], DataType::BF16));
    ins.push(meta(&[2, 8, 64, 1], DataType::F32));
    ins.push(meta(&[1, 8, 64, 48], DataType::F32));
    let out = infer(&s, &ins).unwrap();
    let dims: Vec<Vec<i64>> = out.iter().map(|o| o.dims.clone()).collect();
    assert_eq!(dims, [vec![2, 8, 64, 64], vec![2, 2, 48, 64], vec![2, 2, 48, 64], vec![1, 8, 64, 48]]);
    ins[5].dims = vec![2, 8, 64];
    let e = infer(&s, &ins).unwrap_err();
    assert!(matches!(*e.kind, ShapeErrorKind::Rank { port: "Stats", .. }), "{e}");
    ins[5].dims = vec![2, 8, 64, 2];
    let e = infer(&s, &ins).unwrap_err();
    assert!(e.to_string().contains("port Stats must be [B, H_q, S_q, 1]"), "{e}");
    ins[5].dims = vec![2, 8, 64, 1];
    ins[3].dtype = DataType::F16;
    assert!(infer(&s, &ins).unwrap_err().to_string().contains("port O is f16"));
    // Missing Stats: arity.
    let e = Op::Sdpa(op("sdpa_backward", &[])).infer(&ins[..5], &mut Concrete).unwrap_err();
    assert_eq!(e.to_string(), "`sdpa_backward` takes 6 inputs, found 5");
}

#[test]
fn symbolic_dims_defer_or_decide() {
    let p = |s: &str| SymDim::Param(s.into());
    let l = SymDim::Lit;
    let m = |dims: Vec<SymDim>| TensorMeta { dims, dtype: DataType::BF16 };
    let s = Op::Sdpa(op("sdpa", &[("causal", true.into())]));
    let mut cx = Symbolic::default();
    let out = s
        .infer(
            &[
                m(vec![p("B"), l(8), p("S"), l(64)]),
                m(vec![p("B"), l(2), p("S"), p("D")]),
                m(vec![p("B"), l(2), p("S"), l(64)]),
            ],
            &mut cx,
        )
        .unwrap();
    assert_eq!(out[0].dims, [p("B"), l(8), p("S"), l(64)]);
    assert_eq!(cx.deferred, [(l(64), p("D"))]);
    let e = s
        .infer(
            &[
                m(vec![p("B"), l(8), p("S"), l(64)]),
                m(vec![p("C"), l(2), p("S"), l(64)]),
                m(vec![p("B"), l(2), p("S"), l(64)]),
            ],
            &mut cx,
        )
        .unwrap_err();
    assert!(e.to_string().contains("Q[0] = B must equal K[0] = C"), "{e}");
    let e = s
        .infer(
            &[
                m(vec![l(1), l(8), p("S"), l(64)]),
                m(vec![l(1), l(3), p("S"), l(64)]),
                m(vec![l(1), l(3), p("S"), l(64)]),
            ],
            &mut cx,
        )
        .unwrap_err();
    assert!(e.to_string().contains("8 % 3 != 0"), "{e}");
}

/// Reference arrays for a problem: inputs in [`Op::inputs`](crate::ops::Op::inputs) order.
struct Case {
    op: Sdpa,
    inputs: Vec<Array>,
}

fn case(rng: &mut Rng, op: Sdpa, [b, h_q, h_kv, s_q, s_kv, d]: [i64; 6]) -> Case {
    let mut inputs = vec![rng.array(&[b, h_q, s_q, d]), rng.array(&[b, h_kv, s_kv, d]), rng.array(&[b, h_kv, s_kv, d])];
    if op.pass == SdpaPass::Backward {
        unreachable!("backward cases are made from forward ones");
    }
    for p in op.inputs().iter().skip(3) {
        inputs.push(match p.name {
            "Attn_scale" => Array { dims: vec![1; 4], data: vec![0.3] },
            "Bias" => rng.array(&[1, h_q, s_q, s_kv]),
            "SEQ_LEN_Q" => Array::from_fn(&[b, 1, 1, 1], |i| (s_q as usize - i % 2 * (rng.below(s_q as usize))) as f64),
            "SEQ_LEN_KV" => {
                Array::from_fn(&[b, 1, 1, 1], |i| (s_kv as usize - i % 2 * (rng.below(s_kv as usize))) as f64)
            }
            "Seed" => Array { dims: vec![1; 4], data: vec![1234.0] },
            "Offset" => Array { dims: vec![1; 4], data: vec![7.0] },
            other => panic!("{other}"),
        });
    }
    Case { op, inputs }
}

fn refs(v: &[Array]) -> Vec<&Array> {
    v.iter().collect()
}

/// The backward op matching forward `f`, and its inputs: Q, K, V, O, dO, Stats, then the
/// forward's optional inputs.
fn backward_of(f: &Case, d_o: &Array, d_bias: bool) -> Case {
    let mut fwd = f.op.clone();
    fwd.training = true;
    let outs = fwd.reference(&refs(&f.inputs));
    let mut b = Sdpa { pass: SdpaPass::Backward, training: false, d_bias: d_bias && f.op.bias, ..f.op.clone() };
    b.implementation = Implementation::Auto;
    let mut inputs = f.inputs[..3].to_vec();
    inputs.push(outs[0].clone());
    inputs.push(d_o.clone());
    inputs.push(outs[1].clone());
    inputs.extend(f.inputs[3..].iter().cloned());
    Case { op: b, inputs }
}

#[test]
fn reference_matches_a_direct_formula() {
    // One query, two keys, d = 8: softmax weights by hand.
    let q = Array::from_fn(&[1, 1, 1, 8], |i| if i == 0 { 1.0 } else { 0.0 });
    let k = Array::from_fn(&[1, 1, 2, 8], |i| {
        if i == 0 {
            2.0
        } else if i == 8 {
            -1.0
        } else {
            0.0
        }
    });
    let v = Array::from_fn(&[1, 1, 2, 8], |i| (i / 8) as f64 * 10.0 + 1.0);
    let s = op("sdpa", &[("scale", 0.5.into()), ("training", true.into())]);
    let out = s.reference(&[&q, &k, &v]);
    let (e0, e1) = ((0.5f64 * 2.0).exp(), (-0.5f64).exp());
    let want = (e0 * 1.0 + e1 * 11.0) / (e0 + e1);
    assert!((out[0].data[0] - want).abs() < 1e-12);
    assert!((out[1].data[0] - (e0 + e1).ln()).abs() < 1e-12);
    // Causal top-left: the first query sees only the first key.
    let c = op("sdpa", &[("scale", 0.5.into()), ("causal", true.into())]);
    let q2 = Array::from_fn(&[1, 1, 2, 8], |i| if i % 8 == 0 { 1.0 } else { 0.0 });
    assert_eq!(c.reference(&[&q2, &k, &v])[0].data[0], 1.0);
    // Bottom-right with S_q = 1: the only query sees every key.
    let br = op("sdpa", &[("scale", 0.5.into()), ("causal", true.into()), ("alignment", "bottom_right".into())]);
    assert!((br.reference(&[&q, &k, &v])[0].data[0] - want).abs() < 1e-12);
}

/// Central differences of `L = Σ O ⊙ dO` against the reference backward.
fn check_gradients(f: &Case, rng: &mut Rng) {
    let fwd = f.op.clone();
    let o_dims = fwd.reference(&refs(&f.inputs))[0].dims.clone();
    let d_o = rng.array(&o_dims);
    let loss = |inputs: &[Array]| -> f64 {
        let o = &fwd.reference(&refs(inputs))[0];
        o.data.iter().zip(&d_o.data).map(|(a, b)| a * b).sum()
    };
    let b = backward_of(f, &d_o, true);
    let grads = b.op.reference(&refs(&b.inputs));
    let mut targets = vec![(0usize, 0usize), (1, 1), (2, 2)];
    if let Some(i) = f.op.input_index("Bias") {
        targets.push((i, 3));
    }
    let h = 1e-6;
    for (input, grad) in targets {
        for e in 0..f.inputs[input].data.len() {
            let mut plus = f.inputs.clone();
            plus[input].data[e] += h;
            let mut minus = f.inputs.clone();
            minus[input].data[e] -= h;
            let numeric = (loss(&plus) - loss(&minus)) / (2.0 * h);
            let analytic = grads[grad].data[e];
            assert!(
                (numeric - analytic).abs() < 1e-6 * (1.0 + numeric.abs()),
                "{:?}: d/d input {input}[{e}]: numeric {numeric}, analytic {analytic}",
                f.op
            );
        }
    }
}

#[test]
fn backward_matches_finite_differences() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let configs: Vec<Vec<(&str, AttrValue)>> = vec![
        vec![],
        vec![("causal", true.into())],
        vec![("causal", true.into()), ("alignment", "bottom_right".into())],
        vec![("window", 2.into()), ("causal", true.into())],
        vec![("window", 3.into())],
        vec![("bias", true.into())],
        vec![("padding_mask", true.into()), ("causal", true.into())],
        vec![("padding_mask", true.into()), ("window", 2.into()), ("alignment", "bottom_right".into())],
        vec![("dropout", 0.3.into())],
        vec![("scale_tensor", true.into()), ("bias", true.into())],
    ];
    for attrs in configs {
        let f = case(&mut rng, op("sdpa", &attrs), [2, 4, 2, 3, 5, 8]);
        check_gradients(&f, &mut rng);
    }
    // MQA and equal lengths.
    let f = case(&mut rng, op("sdpa", &[("causal", true.into())]), [1, 3, 1, 4, 4, 8]);
    check_gradients(&f, &mut rng);
}

// ------------------------------------------------------------------------------------------
// The composite subgraph, run on the CPU.

fn permute(a: &Array, perm: [usize; 4]) -> Array {
    let dims: Vec<i64> = perm.iter().map(|&p| a.dims[p]).collect();
    let strides = crate::dim::packed_strides(&a.dims);
    Array::from_fn(&dims, |flat| {
        let idx = Array::unravel(flat as i64, &dims);
        let off: i64 = (0..4).map(|k| idx[k] * strides[perm[k]]).sum();
        a.data[off as usize]
    })
}

/// Runs an expansion on dense inputs; returns the node's outputs. `round` rounds every tensor to
/// its type as cuDNN's storage would.
fn run(x: &Expansion, inputs: &[&Array], n_outputs: usize, round: bool) -> Vec<Array> {
    let mut values: Vec<Option<Array>> = vec![None; x.tensors.len()];
    for (i, t) in x.tensors.iter().enumerate() {
        values[i] = match &t.kind {
            Kind::Input(p) => Some(inputs[*p].clone()),
            Kind::Alias { input, perm } => Some(permute(inputs[*input], *perm)),
            Kind::Scalar(v) => Some(Array { dims: vec![1; 4], data: vec![*v] }),
            _ => None,
        };
    }
    let get = |values: &[Option<Array>], i: usize| {
        values[i].clone().unwrap_or_else(|| panic!("tensor {} ({}) read before written", i, x.tensors[i].name))
    };
    for (name, op) in &x.ops {
        let (out, value) = match op {
            SubOp::Matmul { a, b, c, .. } => {
                let (a, bm) = (get(&values, *a), get(&values, *b));
                let dims = x.tensors[*c].dims.clone();
                let (m, k, n) = (a.dims[2] as usize, a.dims[3] as usize, bm.dims[3] as usize);
                assert_eq!(bm.dims[2] as usize, k, "{name}: inner dims");
                let out = Array::from_fn(&dims, |flat| {
                    let idx = Array::unravel(flat as i64, &dims);
                    let (bb, h, i, j) = (idx[0] as usize, idx[1] as usize, idx[2] as usize, idx[3] as usize);
                    let map = |t: &Array, h: usize| {
                        let tb = if t.dims[0] == 1 { 0 } else { bb };
                        let th = h / (dims[1] as usize / t.dims[1] as usize);
                        tb * t.dims[1] as usize + th
                    };
                    let (ab, bbh) = (map(&a, h), map(&bm, h));
                    (0..k).map(|p| a.data[(ab * m + i) * k + p] * bm.data[(bbh * k + p) * n + j]).sum()
                });
                (*c, out)
            }
            SubOp::Pointwise { mode, inputs: ins, output, axis, .. } => {
                let args: Vec<Array> = ins.iter().map(|i| get(&values, *i)).collect();
                let dims = x.tensors[*output].dims.clone();
                let p = Pointwise::new(*mode);
                let out = Array::from_fn(&dims, |flat| {
                    let idx = Array::unravel(flat as i64, &dims);
                    if *mode == PointwiseMode::GenIndex {
                        return idx[axis.unwrap_or(0) as usize] as f64;
                    }
                    let vals: Vec<f64> =
                        args.iter()
                            .map(|t| {
                                let off: i64 = (0..4)
                                    .map(|k| {
                                        if t.dims[k] == 1 {
                                            0
                                        } else {
                                            idx[k] * crate::dim::packed_strides(&t.dims)[k]
                                        }
                                    })
                                    .sum();
                                t.data[off as usize]
                            })
                            .collect();
                    p.apply(&vals)
                });
                (*output, out)
            }
            SubOp::Reduction { mode, x: input, y } => {
                let a = get(&values, *input);
                let dims = x.tensors[*y].dims.clone();
                let init = if *mode == ReductionMode::Max { f64::NEG_INFINITY } else { 0.0 };
                let mut out = Array { dims: dims.clone(), data: vec![init; dims.iter().product::<i64>() as usize] };
                let strides = crate::dim::packed_strides(&dims);
                for (flat, v) in a.data.iter().enumerate() {
                    let idx = Array::unravel(flat as i64, &a.dims);
                    let off: i64 = (0..4).map(|k| idx[k] / (a.dims[k] / dims[k]) * strides[k]).sum();
                    let acc = &mut out.data[off as usize];
                    *acc = match mode {
                        ReductionMode::Max => acc.max(*v),
                        ReductionMode::Sum => *acc + v,
                        ReductionMode::Amax => acc.max(v.abs()),
                        other => panic!("{other:?}"),
                    };
                }
                (*y, out)
            }
            SubOp::Rng { keep, seed, offset, y } => {
                let (seed, offset) = (get(&values, *seed).data[0] as i64, get(&values, *offset).data[0] as i64);
                let dims = x.tensors[*y].dims.clone();
                let out = Array::from_fn(&dims, |flat| {
                    f64::from(u8::from(super::reference::dropout_keep(seed, offset, flat as u64, 1.0 - keep)))
                });
                (*y, out)
            }
            SubOp::Reshape { x: input, y, perm } => (*y, permute(&get(&values, *input), *perm)),
            SubOp::PagedCacheLoad { container, page_table, seq_len, y } => {
                let (pool, table, lens) = (get(&values, *container), get(&values, *page_table), get(&values, *seq_len));
                let t = &x.tensors[*y];
                // Kᵀ `[B, H, D, S]` when its third dim has stride 1 (cudnn-frontend's rule).
                let transposed = t.strides[2] == 1;
                let s_kv = if transposed { t.dims[3] } else { t.dims[2] };
                let dense = super::paged::gather(&pool, &table, &lens, t.dims[0], table.dims[2], s_kv);
                (*y, if transposed { permute(&dense, [0, 1, 3, 2]) } else { dense })
            }
        };
        let mut value = value;
        if round {
            value.round_to(x.tensors[out].data_type);
        }
        values[out] = Some(value);
    }
    (0..n_outputs)
        .map(|o| {
            let i = x
                .tensors
                .iter()
                .position(|t| t.kind == Kind::Output(o))
                .unwrap_or_else(|| panic!("output {o} is never written"));
            get(&values, i)
        })
        .collect()
}

fn tensor(name: &'static str, uid: i64, a: &Array, dtype: DataType) -> Port<'static> {
    Port {
        name,
        uid,
        dims: a.dims.clone(),
        strides: crate::dim::packed_strides(&a.dims),
        data_type: dtype,
        is_virtual: false,
        by_value: false,
        producer: None,
        readers: 0,
    }
}

fn expand_case(c: &Case, outputs: &[Array], version: usize) -> Expansion {
    let ins: Vec<Port> =
        c.inputs.iter().enumerate().map(|(i, a)| tensor("in", i as i64 + 1, a, DataType::BF16)).collect();
    let outs: Vec<Port> =
        outputs.iter().enumerate().map(|(i, a)| tensor("out", 100 + i as i64, a, DataType::BF16)).collect();
    let cx = composite::Context {
        inputs: &ins,
        outputs: &outs,
        intermediate: DataType::F32,
        compute: DataType::F32,
        version,
    };
    let mut next = 1000;
    let x = composite::expand(&c.op, &cx, &mut next).expect("expands");
    // Fresh uids are distinct and past the graph's.
    let mut fresh: Vec<i64> = x
        .tensors
        .iter()
        .filter(|t| matches!(t.kind, Kind::Virtual | Kind::Scalar(_) | Kind::Workspace { .. }))
        .map(|t| t.uid)
        .collect();
    let n = fresh.len();
    fresh.sort_unstable();
    fresh.dedup();
    assert_eq!(fresh.len(), n);
    assert!(fresh.iter().all(|&u| (1000..next).contains(&u)));
    x
}

/// Rows `(b, h, i)` with at least one visible key.
fn live_rows(f: &Case) -> Vec<bool> {
    let mut fwd = f.op.clone();
    fwd.training = true;
    let stats = &fwd.reference(&refs(&f.inputs))[1];
    stats.data.iter().map(|s| s.is_finite()).collect()
}

fn assert_close(what: &str, got: &Array, want: &Array, rows: Option<(&[bool], usize)>, tol: f64) {
    assert_eq!(got.dims, want.dims, "{what}");
    for (e, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        if let Some((live, width)) = rows {
            if !live[e / width] {
                continue;
            }
        }
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{e}]: composite {g}, reference {w}");
    }
}

#[test]
fn composite_subgraph_computes_the_reference() {
    let mut rng = Rng(0xfeed_beef_0bad_f00d);
    let configs: Vec<Vec<(&str, AttrValue)>> = vec![
        vec![],
        vec![("training", true.into())],
        vec![("causal", true.into()), ("training", true.into())],
        vec![("causal", true.into()), ("alignment", "bottom_right".into())],
        vec![("window", 3.into()), ("causal", true.into())],
        vec![("window", 4.into()), ("alignment", "bottom_right".into())],
        vec![("bias", true.into()), ("scale", 0.2.into())],
        vec![("scale_tensor", true.into())],
        vec![("padding_mask", true.into()), ("training", true.into())],
        vec![("padding_mask", true.into()), ("causal", true.into()), ("alignment", "bottom_right".into())],
        vec![
            ("padding_mask", true.into()),
            ("window", 2.into()),
            ("causal", true.into()),
            ("alignment", "bottom_right".into()),
        ],
        vec![("dropout", 0.2.into()), ("training", true.into())],
    ];
    // Shapes: GQA, MQA, odd lengths, S_q < S_kv and S_q > S_kv.
    let shapes = [[2, 4, 2, 5, 7, 8], [1, 3, 1, 6, 6, 16], [2, 2, 2, 9, 4, 8], [1, 4, 4, 1, 5, 8]];
    for attrs in &configs {
        for shape in shapes {
            let s = op("sdpa", attrs);
            let br_or_window = s.bottom_right() || s.window.is_some();
            if br_or_window && !s.padding_mask && shape[3] > shape[4] {
                continue; // the shape rule forbids it
            }
            let f = case(&mut rng, s, shape);
            let want = f.op.reference(&refs(&f.inputs));
            let x = expand_case(&f, &want, 91900);
            let got = run(&x, &refs(&f.inputs), want.len(), false);
            let live = live_rows(&f);
            let d_v = shape[5] as usize;
            assert_close(&format!("O {attrs:?} {shape:?}"), &got[0], &want[0], Some((&live, d_v)), 1e-7);
            if f.op.training {
                assert_close(&format!("Stats {attrs:?} {shape:?}"), &got[1], &want[1], Some((&live, 1)), 1e-7);
            }
            // Backward.
            if shape[3] == 1 && shape[4] == 1 {
                continue;
            }
            let d_o = rng.array(&want[0].dims);
            let mut b = backward_of(&f, &d_o, true);
            // Rows with no visible key have -inf statistics; cuDNN's are finite there.
            b.inputs[5].data.iter_mut().for_each(|s| {
                if !s.is_finite() {
                    *s = 0.0
                }
            });
            let grads = b.op.reference(&refs(&b.inputs));
            for deterministic in [false, true] {
                b.op.deterministic = deterministic;
                let x = expand_case(&b, &grads, 91900);
                assert!(x.workspace_bytes > 0);
                let got = run(&x, &refs(&b.inputs), grads.len(), false);
                assert_eq!(got.len(), grads.len());
                for ((g, want), name) in got.iter().zip(&grads).zip(["dQ", "dK", "dV", "dBias"]) {
                    assert_close(&format!("{name} {attrs:?} {shape:?} det={deterministic}"), g, want, None, 1e-7);
                }
            }
        }
    }
}

#[test]
fn composite_with_storage_rounding_stays_within_bf16_tolerance() {
    let mut rng = Rng(42);
    let f = case(&mut rng, op("sdpa", &[("causal", true.into())]), [1, 4, 2, 33, 33, 64]);
    let want = f.op.reference(&refs(&f.inputs));
    let x = expand_case(&f, &want, 91900);
    let got = run(&x, &refs(&f.inputs), 1, true);
    assert_close("O rounded", &got[0], &want[0], None, 2e-2);
}

#[test]
fn composite_structure_follows_cudnn_frontend() {
    let mut rng = Rng(7);
    let f = case(&mut rng, op("sdpa", &[("causal", true.into())]), [1, 2, 2, 8, 8, 8]);
    let want = f.op.reference(&refs(&f.inputs));
    let x = expand_case(&f, &want, 91900);
    let names: Vec<&str> = x.ops.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "bmm1",
            "attn_scale",
            "gen_row_index",
            "gen_col_index",
            "row>=col",
            "right_bound_select",
            "Max",
            "sub_M",
            "exp_sub_M",
            "sum",
            "log",
            "add",
            "softmax",
            "bmm2"
        ]
    );
    assert_eq!(x.workspace_bytes, 0);
    // Kᵀ is K's uid with its last two dims and strides swapped.
    let kt = x.tensors.iter().find(|t| matches!(t.kind, Kind::Alias { .. })).unwrap();
    assert_eq!((kt.uid, kt.dims.clone(), kt.strides.clone()), (2, vec![1, 2, 8, 8], vec![128, 64, 1, 8]));
    // The mask value: -inf from cuDNN 9.10, the lowest finite f32 before.
    assert_eq!(composite::masked_value(91900), f64::NEG_INFINITY);
    assert_eq!(composite::masked_value(90800), f64::from(f32::MIN));
    // The second matmul's A is in the I/O type.
    let SubOp::Matmul { a, .. } = x.ops.last().unwrap().1 else { panic!() };
    assert_eq!(x.tensors[a].data_type, DataType::BF16);
}

#[test]
fn backward_workspace_is_the_softmax_sum_and_the_dq_accumulator() {
    let mut rng = Rng(9);
    let f = case(&mut rng, op("sdpa", &[]), [2, 4, 4, 16, 16, 64]);
    let outs = f.op.reference(&refs(&f.inputs));
    let d_o = rng.array(&outs[0].dims);
    let mut b = backward_of(&f, &d_o, false);
    let grads = b.op.reference(&refs(&b.inputs));
    let x = expand_case(&b, &grads, 91900);
    let ws: Vec<(&str, usize)> = x
        .tensors
        .iter()
        .filter_map(|t| match t.kind {
            Kind::Workspace { offset } => Some((t.name, offset)),
            _ => None,
        })
        .collect();
    // dQ_accum: 2·4·16·64 f32 = 32 KiB; softmax_sum 2·4·16 f32 = 512 B.
    assert_eq!(ws, [("dQ_accum", 0), ("softmax_sum", 32768)]);
    assert_eq!(x.workspace_bytes, 32768 + 512);
    b.op.deterministic = true;
    let x = expand_case(&b, &grads, 91900);
    assert_eq!(x.workspace_bytes, 512);
}

/// fp8 attention's Q, K, V (`e4m3`) and its six scale inputs.
fn fp8_qkv(b: i64, h: i64, s: i64, d: i64) -> Vec<TensorMeta<i64>> {
    let mut ins: Vec<TensorMeta<i64>> = qkv(b, h, h, s, s, d);
    ins.iter_mut().for_each(|t| t.dtype = DataType::Fp8E4M3);
    ins.extend((0..6).map(|_| meta(&[1, 1, 1, 1], DataType::F32)));
    ins
}

#[test]
fn fp8_ports_and_shapes() {
    let s = op("sdpa", &[("fp8", "e4m3".into())]);
    let names: Vec<&str> = s.inputs().iter().map(|p| p.name).collect();
    assert_eq!(names, ["Q", "K", "V", "Descale_Q", "Descale_K", "Descale_V", "Descale_S", "Scale_S", "Scale_O"]);
    assert_eq!(s.outputs(), ["O", "Amax_S", "Amax_O"]);
    let t = op("sdpa", &[("fp8", "e5m2".into()), ("training", true.into())]);
    assert_eq!(t.outputs(), ["O", "Stats", "Amax_S", "Amax_O"]);
    assert_eq!(t.fp8, Some(DataType::Fp8E5M2));
    assert_eq!(Op::from_call("sdpa", &t.call_attrs()).unwrap(), Op::Sdpa(t));
    let out = infer(&s, &fp8_qkv(2, 4, 128, 128)).unwrap();
    // O in Q's fp8 type (cuDNN 9.19 on Hopper writes no bf16 O), the amaxes f32 scalars.
    assert_eq!((&out[0].dims, out[0].dtype), (&vec![2, 4, 128, 128], Some(DataType::Fp8E4M3)));
    let why = out[0].reason.unwrap_or_default();
    assert!(why.contains("only supported on Blackwell with cuDNN 9.13.0 and newer"), "{why}");
    for amax in &out[1..] {
        assert_eq!(*amax, OutputMeta { dims: vec![1; 4], dtype: Some(DataType::F32), reason: None });
    }
}

#[test]
fn fp8_shape_errors_name_the_rule() {
    let s = op("sdpa", &[("fp8", "e4m3".into())]);
    let err = |s: &Sdpa, ins: &[TensorMeta<i64>]| infer(s, ins).unwrap_err().to_string();
    // Mixed fp8 and bf16.
    let mut ins = fp8_qkv(2, 4, 128, 128);
    ins[2].dtype = DataType::BF16;
    assert_eq!(err(&s, &ins), "`sdpa`: port V is bf16 but Q is fp8_e4m3; Q, K and V must have one type");
    // Q of another type than the mode.
    let mut ins = fp8_qkv(2, 4, 128, 128);
    ins[..3].iter_mut().for_each(|t| t.dtype = DataType::Fp8E5M2);
    assert_eq!(err(&s, &ins), "`sdpa`: port Q is fp8_e5m2 but `fp8 = e4m3` attention takes fp8_e4m3 Q, K and V");
    // An fp8 Q without the attribute says what to add.
    let e = err(&op("sdpa", &[]), &fp8_qkv(2, 4, 128, 128)[..3]);
    assert!(e.contains("fp8 attention needs `fp8 = e4m3` and the inputs Descale_Q"), "{e}");
    // Head dims: multiples of 16, at most 256.
    let e = err(&s, &fp8_qkv(2, 4, 128, 72));
    assert!(e.ends_with("is 72; cuDNN's fp8 attention needs a multiple of 16, at most 256"), "{e}");
    assert!(err(&s, &fp8_qkv(2, 4, 128, 272)).contains("at most 256"));
    // The scale inputs are f32 [1, 1, 1, 1].
    let mut ins = fp8_qkv(2, 4, 128, 128);
    ins[5].dims = vec![1, 4, 1, 1];
    assert!(err(&s, &ins).contains("port Descale_V must be [1, 1, 1, 1]"));
    let mut ins = fp8_qkv(2, 4, 128, 128);
    ins[8].dtype = DataType::BF16;
    assert_eq!(err(&s, &ins), "`sdpa`: port Scale_O is bf16 but must be f32");
    // No bias, as in cuDNN's fp8 engines.
    let b = op("sdpa", &[("fp8", "e4m3".into()), ("bias", true.into())]);
    let mut ins = fp8_qkv(2, 4, 128, 128);
    ins.insert(3, meta(&[1, 4, 128, 128], DataType::F32));
    assert!(err(&b, &ins).contains("fp8 attention takes no bias"));
}

/// An fp8 attention case with inputs that are exact e4m3 values and scales as a delayed-scaling
/// recipe would give them.
fn fp8_case(rng: &mut Rng, attrs: &[(&str, AttrValue)], [b, h, s_q, s_kv, d]: [i64; 5]) -> Case {
    let op = op("sdpa", attrs);
    let fp8 = |a: Array| Array { data: a.data.iter().map(|x| DataType::Fp8E4M3.round(x * 4.0)).collect(), ..a };
    let mut inputs = vec![fp8(rng.array(&[b, h, s_q, d])), fp8(rng.array(&[b, h, s_kv, d])), fp8(rng.array(&[b, h, s_kv, d]))];
    let scalar = |v: f64| Array { dims: vec![1; 4], data: vec![v] };
    for p in op.inputs().iter().skip(3) {
        inputs.push(match p.name {
            "Descale_Q" | "Descale_K" | "Descale_V" => scalar(0.25),
            "Descale_S" => scalar(1.0 / 448.0),
            "Scale_S" => scalar(448.0),
            "Scale_O" => scalar(64.0),
            "SEQ_LEN_Q" => Array::from_fn(&[b, 1, 1, 1], |i| (s_q - i as i64 % 2) as f64),
            "SEQ_LEN_KV" => Array::from_fn(&[b, 1, 1, 1], |i| (s_kv - 2 * (i as i64 % 2)) as f64),
            other => panic!("{other}"),
        });
    }
    Case { op, inputs }
}

#[test]
fn fp8_reference_quantizes_where_cudnn_frontend_does() {
    // One query, two keys: P by hand, quantized with Scale_S, then O with Scale_O.
    let s = op("sdpa", &[("fp8", "e4m3".into()), ("scale", 1.0.into())]);
    let q = Array::from_fn(&[1, 1, 1, 16], |i| if i == 0 { 2.0 } else { 0.0 });
    let k = Array::from_fn(&[1, 1, 2, 16], |i| if i == 0 { 1.0 } else { 0.0 });
    let v = Array::from_fn(&[1, 1, 2, 16], |i| if i / 16 == 0 { 1.0 } else { 3.0 });
    let scalar = |v: f64| Array { dims: vec![1; 4], data: vec![v] };
    let (dq, dk, dv, ds, ss, so) = (scalar(0.5), scalar(1.0), scalar(2.0), scalar(1.0 / 448.0), scalar(448.0), scalar(8.0));
    let out = s.reference(&[&q, &k, &v, &dq, &dk, &dv, &ds, &ss, &so]);
    // Scores 2·1·0.5 = 1 and 0: P = (e/(e+1), 1/(e+1)).
    let e = 1f64.exp();
    let p = [e / (e + 1.0), 1.0 / (e + 1.0)];
    let p8 = p.map(|x| DataType::Fp8E4M3.round(x * 448.0));
    let o = (p8[0] * 1.0 + p8[1] * 3.0) / 448.0 * 2.0;
    assert_eq!(out[0].data[0], DataType::Fp8E4M3.round(o * 8.0));
    assert_ne!(p8[0] / 448.0, p[0], "P was quantized");
    assert_eq!(out[1].data, [p[0]]);
    assert!((out[2].data[0] - o).abs() < 1e-12);
}

#[test]
fn fp8_composite_computes_the_reference() {
    let mut rng = Rng(0x0f8_5dba);
    let configs: Vec<Vec<(&str, AttrValue)>> = vec![
        vec![("fp8", "e4m3".into())],
        vec![("fp8", "e4m3".into()), ("causal", true.into()), ("training", true.into())],
        vec![("fp8", "e4m3".into()), ("padding_mask", true.into())],
    ];
    for attrs in &configs {
        let f = fp8_case(&mut rng, attrs, [2, 2, 9, 12, 16]);
        let want = f.op.reference(&refs(&f.inputs));
        let ins: Vec<Port> = f
            .inputs
            .iter()
            .enumerate()
            .map(|(i, a)| tensor("in", i as i64 + 1, a, if i < 3 { DataType::Fp8E4M3 } else { DataType::F32 }))
            .collect();
        let outs: Vec<Port> = want
            .iter()
            .enumerate()
            .map(|(i, a)| tensor("out", 100 + i as i64, a, if i == 0 { DataType::Fp8E4M3 } else { DataType::F32 }))
            .collect();
        let cx = composite::Context {
            inputs: &ins,
            outputs: &outs,
            intermediate: DataType::F32,
            compute: DataType::F32,
            version: 91900,
        };
        let x = composite::expand(&f.op, &cx, &mut 1000).expect("expands");
        let names: Vec<&str> = x.ops.iter().map(|(n, _)| *n).collect();
        for (before, after) in [("attn_scale", "descale_q"), ("descale_q", "descale_k"), ("softmax", "amax_s"), ("amax_s", "scale_s"), ("scale_s", "bmm2"), ("bmm2", "descale_a"), ("descale_a", "descale_b"), ("descale_b", "scale_c"), ("scale_c", "amax_c")] {
            let at = |n: &str| names.iter().position(|m| *m == n).unwrap_or_else(|| panic!("{n} in {names:?}"));
            assert!(at(before) < at(after), "{before} before {after}: {names:?}");
        }
        // The second matmul reads P in fp8.
        let Some((_, SubOp::Matmul { a, .. })) = x.ops.iter().find(|(n, _)| *n == "bmm2") else { panic!() };
        assert_eq!(x.tensors[*a].data_type, DataType::Fp8E4M3);
        // Stored as cuDNN stores (f32 intermediates, P and O in fp8), the subgraph gives the
        // reference's fp8 O: equal, or one e4m3 step apart where an f32 rounding tips P or O
        // across a rounding boundary.
        let got = run(&x, &refs(&f.inputs), want.len(), true);
        // Rows with no visible key (padding) are unspecified in cuDNN (0 in the reference).
        let live = live_rows(&f);
        let d_v = want[0].dims[3] as usize;
        let (mut equal, mut n) = (0, 0);
        for (e, (g, w)) in got[0].data.iter().zip(&want[0].data).enumerate() {
            if !live[e / d_v] {
                continue;
            }
            n += 1;
            let step = (w.abs() / 8.0).max(1.0 / 512.0) * 1.01;
            assert!((g - w).abs() <= step, "{attrs:?}: O composite {g}, reference {w}");
            equal += usize::from(g == w);
        }
        assert!(equal * 10 >= n * 9, "{attrs:?}: {equal} of {n} equal");
        for (g, w) in got[got.len() - 2..].iter().zip(&want[want.len() - 2..]) {
            assert_close(&format!("amax {attrs:?}"), g, w, None, 1e-6);
        }
    }
}

/// fp8 attention's backward inputs (`e4m3`): Q, K, V, O, dO, Stats and its twelve scale inputs.
fn fp8_backward_metas(b: i64, h: i64, s: i64, d: i64) -> Vec<TensorMeta<i64>> {
    let mut ins: Vec<TensorMeta<i64>> = qkv(b, h, h, s, s, d);
    ins.extend([meta(&[b, h, s, d], DataType::BF16), meta(&[b, h, s, d], DataType::BF16)]);
    ins.iter_mut().for_each(|t| t.dtype = DataType::Fp8E4M3);
    ins.push(meta(&[b, h, s, 1], DataType::F32));
    ins.extend((0..12).map(|_| meta(&[1, 1, 1, 1], DataType::F32)));
    ins
}

#[test]
fn fp8_backward_ports_and_shapes() {
    let s = op("sdpa_backward", &[("fp8", "e4m3".into()), ("causal", true.into())]);
    let names: Vec<&str> = s.inputs().iter().map(|p| p.name).collect();
    let mut want = vec!["Q", "K", "V", "O", "dO", "Stats"];
    want.extend(FP8_BACKWARD_INPUTS);
    assert_eq!(names, want);
    assert_eq!(s.outputs(), ["dQ", "dK", "dV", "Amax_dQ", "Amax_dK", "Amax_dV", "Amax_dP"]);
    assert_eq!(Op::from_call("sdpa_backward", &s.call_attrs()).unwrap(), Op::Sdpa(s.clone()));
    let padded = op("sdpa_backward", &[("fp8", "e5m2".into()), ("padding_mask", true.into())]);
    let names: Vec<&str> = padded.inputs().iter().map(|p| p.name).collect();
    assert_eq!(&names[6..9], ["SEQ_LEN_Q", "SEQ_LEN_KV", "Descale_Q"]);
    let out = infer(&s, &fp8_backward_metas(2, 4, 128, 128)).unwrap();
    // dQ, dK, dV in the fp8 type, with the reason cuDNN gives; four f32 amaxes.
    for g in &out[..3] {
        assert_eq!((&g.dims, g.dtype), (&vec![2, 4, 128, 128], Some(DataType::Fp8E4M3)));
        let why = g.reason.unwrap_or_default();
        assert!(why.starts_with("fp8 attention's backward writes dQ, dK and dV in its fp8 type"), "{why}");
        assert!(why.contains("only supported on Blackwell with cuDNN 9.13.0 and newer"), "{why}");
    }
    for amax in &out[3..] {
        assert_eq!(*amax, OutputMeta { dims: vec![1; 4], dtype: Some(DataType::F32), reason: None });
    }
}

#[test]
fn fp8_backward_shape_errors_name_the_rule() {
    let s = op("sdpa_backward", &[("fp8", "e4m3".into())]);
    let err = |s: &Sdpa, ins: &[TensorMeta<i64>]| infer(s, ins).unwrap_err().to_string();
    // O and dO in the fp8 type too.
    for (i, port) in [(3, "O"), (4, "dO")] {
        let mut ins = fp8_backward_metas(2, 4, 128, 128);
        ins[i].dtype = DataType::BF16;
        assert_eq!(err(&s, &ins), format!("`sdpa_backward`: port {port} is bf16 but must be fp8_e4m3 (the type of Q)"));
    }
    // A missing scale input's place holds another: named with its shape.
    let mut ins = fp8_backward_metas(2, 4, 128, 128);
    ins[17].dims = vec![2, 4, 1, 1];
    assert!(err(&s, &ins).contains("port Scale_dP must be [1, 1, 1, 1]"));
    // An fp8 Q without the attribute names the backward's twelve inputs.
    let plain = op("sdpa_backward", &[]);
    let e = err(&plain, &fp8_backward_metas(2, 4, 128, 128)[..6]);
    assert!(e.contains("`fp8 = e4m3` and the inputs Descale_Q, Descale_K, Descale_V, Descale_O, Descale_dO, Descale_S, Descale_dP, Scale_S, Scale_dQ, Scale_dK, Scale_dV, Scale_dP after Q, K, V, O, dO, Stats"), "{e}");
    // No dropout, no deterministic variant.
    for (attr, value, says) in [
        ("dropout", AttrValue::Float(0.1), "takes no dropout"),
        ("deterministic", AttrValue::Bool(true), "no deterministic variant on Hopper"),
    ] {
        let o = op("sdpa_backward", &[("fp8", "e4m3".into()), (attr, value)]);
        let mut ins = fp8_backward_metas(2, 4, 128, 128);
        if attr == "dropout" {
            ins.insert(6, meta(&[1, 1, 1, 1], DataType::I64));
            ins.insert(7, meta(&[1, 1, 1, 1], DataType::I64));
        }
        assert!(err(&o, &ins).contains(says), "{attr}: {}", err(&o, &ins));
    }
}

/// An fp8 backward case from an fp8 forward case `f` (e4m3 inputs, delayed-scaling scales):
/// the forward's O and Stats, an e4m3 dO, and the twelve scale inputs.
fn fp8_backward_of(f: &Case, rng: &mut Rng) -> Case {
    let fwd = Sdpa { training: true, ..f.op.clone() };
    let outs = fwd.reference(&refs(&f.inputs));
    let d_o = Array { data: rng.array(&outs[0].dims).data.iter().map(|x| DataType::Fp8E4M3.round(x * 200.0)).collect(), ..outs[0].clone() };
    let b = Sdpa { pass: SdpaPass::Backward, training: false, ..f.op.clone() };
    let scalar = |v: f64| Array { dims: vec![1; 4], data: vec![v] };
    let mut inputs = f.inputs[..3].to_vec();
    // Rows with no visible key have -inf statistics; cuDNN's are finite there.
    let mut stats = outs[1].clone();
    stats.data.iter_mut().filter(|s| !s.is_finite()).for_each(|s| *s = 0.0);
    inputs.extend([outs[0].clone(), d_o, stats]);
    for p in b.inputs().iter().skip(6) {
        inputs.push(match p.name {
            "SEQ_LEN_Q" | "SEQ_LEN_KV" => f.inputs[f.op.input_index(p.name).unwrap_or(0)].clone(),
            "Descale_Q" | "Descale_K" | "Descale_V" => scalar(0.25),
            "Descale_O" => scalar(1.0 / 64.0),
            "Descale_dO" => scalar(1.0 / 200.0),
            "Descale_S" => scalar(1.0 / 448.0),
            "Scale_S" => scalar(448.0),
            "Descale_dP" => scalar(1.0 / 1024.0),
            "Scale_dP" => scalar(1024.0),
            "Scale_dQ" | "Scale_dK" | "Scale_dV" => scalar(16.0),
            other => panic!("{other}"),
        });
    }
    Case { op: b, inputs }
}

#[test]
fn fp8_backward_composite_computes_the_reference() {
    let mut rng = Rng(0x0f8_bacd);
    let configs: Vec<Vec<(&str, AttrValue)>> = vec![
        vec![("fp8", "e4m3".into())],
        vec![("fp8", "e4m3".into()), ("causal", true.into())],
        vec![("fp8", "e4m3".into()), ("padding_mask", true.into())],
    ];
    // The last run is grouped-query (one K/V head for two query heads).
    for (run_no, attrs) in configs.iter().chain(&configs[1..2]).enumerate() {
        let mut f = fp8_case(&mut rng, attrs, [2, 2, 9, 12, 16]);
        if run_no == configs.len() {
            let fp8 = |a: Array| Array { data: a.data.iter().map(|x| DataType::Fp8E4M3.round(x * 4.0)).collect(), ..a };
            f.inputs[1] = fp8(rng.array(&[2, 1, 12, 16]));
            f.inputs[2] = fp8(rng.array(&[2, 1, 12, 16]));
        }
        let bwd = fp8_backward_of(&f, &mut rng);
        let want = bwd.op.reference(&refs(&bwd.inputs));
        assert_eq!(want.len(), 7);
        let fp8_port = |i: usize| i < 5;
        let ins: Vec<Port> = bwd
            .inputs
            .iter()
            .enumerate()
            .map(|(i, a)| tensor("in", i as i64 + 1, a, if fp8_port(i) { DataType::Fp8E4M3 } else { DataType::F32 }))
            .collect();
        let outs: Vec<Port> = want
            .iter()
            .enumerate()
            .map(|(i, a)| tensor("out", 100 + i as i64, a, if i < 3 { DataType::Fp8E4M3 } else { DataType::F32 }))
            .collect();
        let cx = composite::Context {
            inputs: &ins,
            outputs: &outs,
            intermediate: DataType::F32,
            compute: DataType::F32,
            version: 91900,
        };
        let x = composite::expand(&bwd.op, &cx, &mut 1000).expect("expands");
        // No workspace: cudnn-frontend's fp8 backward keeps the softmax sum virtual.
        assert_eq!(x.workspace_bytes, 0);
        let names: Vec<&str> = x.ops.iter().map(|(n, _)| *n).collect();
        let order = [
            "mul_dO_O", "reduce_dO", "descale_dO", "descale_O", "bmm_Q_K", "attn_scale", "descale_q", "descale_k",
            "sub_dV_Stats", "exp_dV", "scale_S", "S_transpose", "bmm_S_T_dO", "bmm_dO_V_T", "sub_dP_softmax_sum",
            "mul_dP_exp_S", "mul_dS_attn_scale", "amax_dP", "scale_dP", "bmm_dP_K", "dP_T", "bmm_dP_T_Q",
        ];
        let at = |n: &str| names.iter().position(|m| *m == n).unwrap_or_else(|| panic!("{n} in {names:?}"));
        for pair in order.windows(2) {
            assert!(at(pair[0]) < at(pair[1]), "{} before {}: {names:?}", pair[0], pair[1]);
        }
        // Each gradient's matmul reads fp8 operands: P and dS are cast to the fp8 type.
        for m in ["bmm_S_T_dO", "bmm_dP_K", "bmm_dP_T_Q"] {
            let Some((_, SubOp::Matmul { a, b, .. })) = x.ops.iter().find(|(n, _)| *n == m) else { panic!("{m}") };
            assert_eq!((x.tensors[*a].data_type, x.tensors[*b].data_type), (DataType::Fp8E4M3, DataType::Fp8E4M3), "{m}");
        }
        // Stored as cuDNN stores (f32 intermediates, P, dS and the gradients in fp8), the
        // subgraph gives the reference's gradients: most equal, the rest one e4m3 step apart
        // where an f32 rounding tips a value across a rounding boundary.
        let got = run(&x, &refs(&bwd.inputs), want.len(), true);
        let grouped = x.ops.iter().filter(|(n, _)| *n == "gqa_c").count();
        assert_eq!(grouped, if run_no == configs.len() { 2 } else { 0 }, "dK and dV summed over the group");
        let (mut equal, mut n) = (0, 0);
        for (k, grad) in ["dQ", "dK", "dV"].iter().enumerate() {
            for (g, w) in got[k].data.iter().zip(&want[k].data) {
                n += 1;
                let step = (w.abs() / 8.0).max(1.0 / 512.0) * 1.01;
                assert!((g - w).abs() <= 2.0 * step, "{attrs:?}: {grad} composite {g}, reference {w}");
                equal += usize::from(g == w);
            }
        }
        assert!(equal * 10 >= n * 8, "{attrs:?}: {equal} of {n} equal");
        for (k, (g, w)) in got[3..].iter().zip(&want[3..]).enumerate() {
            assert_close(&format!("amax {k} {attrs:?}"), g, w, None, 1e-3);
        }
    }
}

/// A paged case: the dense case `shape` (`[b, h_q, h_kv, s_q, s_kv, d]`, `s_kv` a multiple of
/// `page`) with K and V scattered page by page into pools of `spare` more pages than needed, in
/// a shuffled order, and the tables that name them. Returns the paged case and the dense one
/// (padding mask, same lengths).
fn paged_case(rng: &mut Rng, attrs: &[(&str, AttrValue)], shape: [i64; 6], page: i64, spare: i64) -> (Case, Case) {
    let [b, _, h_kv, _, s_kv, d] = shape;
    let mut dense_attrs = attrs.to_vec();
    dense_attrs.push(("padding_mask", true.into()));
    let dense = case(rng, op("sdpa", &dense_attrs), shape);
    let width = s_kv / page;
    let pages = b * width + spare;
    // A shuffled assignment of pages to (sequence, slot).
    let mut order: Vec<i64> = (0..pages).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let table = Array::from_fn(&[b, 1, width, 1], |i| order[i] as f64);
    let scatter = |src: &Array| {
        let mut pool = Array::from_fn(&[pages, h_kv, page, d], |_| 9.0); // never read
        for seq in 0..b {
            for j in 0..s_kv {
                let p = order[(seq * width + j / page) as usize];
                for h in 0..h_kv {
                    for e in 0..d {
                        let dst = (((p * h_kv + h) * page + j % page) * d + e) as usize;
                        pool.data[dst] = src.data[(((seq * h_kv + h) * s_kv + j) * d + e) as usize];
                    }
                }
            }
        }
        pool
    };
    let mut paged_attrs = dense_attrs.clone();
    paged_attrs.push(("paged", true.into()));
    let paged_op = op("sdpa", &paged_attrs);
    let names: Vec<&str> = paged_op.inputs().iter().map(|p| p.name).collect();
    let inputs = names
        .iter()
        .map(|&n| match n {
            "K" => scatter(&dense.inputs[1]),
            "V" => scatter(&dense.inputs[2]),
            "Page_table_K" | "Page_table_V" => table.clone(),
            other => dense.inputs[dense.op.input_index(other).unwrap()].clone(),
        })
        .collect();
    (Case { op: paged_op, inputs }, dense)
}

#[test]
fn paged_ports_and_shapes() {
    let s = op("sdpa", &[("padding_mask", true.into()), ("paged", true.into()), ("training", true.into())]);
    let names: Vec<&str> = s.inputs().iter().map(|p| p.name).collect();
    assert_eq!(names, ["Q", "K", "V", "SEQ_LEN_Q", "SEQ_LEN_KV", "Page_table_K", "Page_table_V"]);
    // Decode: 4 sequences, 32 query heads over 8 KV heads, pools of 100 pages of 16 tokens,
    // tables 8 wide: capacity 128.
    let metas = |table_k: &[i64], table_v: &[i64], page_v: i64| {
        vec![
            meta(&[4, 32, 1, 128], DataType::BF16),
            meta(&[100, 8, 16, 128], DataType::BF16),
            meta(&[100, 8, page_v, 128], DataType::BF16),
            meta(&[4, 1, 1, 1], DataType::I32),
            meta(&[4, 1, 1, 1], DataType::I32),
            meta(table_k, DataType::I32),
            meta(table_v, DataType::I32),
        ]
    };
    let out = infer(&s, &metas(&[4, 1, 8, 1], &[4, 1, 8, 1], 16)).unwrap();
    assert_eq!(out[0].dims, [4, 32, 1, 128]);
    assert_eq!(out[1].dims, [4, 32, 1, 1]);
    let err = |s: &Sdpa, m: Vec<TensorMeta<i64>>| infer(s, &m).unwrap_err().to_string();
    let e = err(&s, metas(&[3, 1, 8, 1], &[4, 1, 8, 1], 16));
    assert!(e.contains("port Page_table_K must be [B, 1, T, 1] (T: the table width) = [4, 1, 8, 1], found [3, 1, 8, 1]"), "{e}");
    let e = err(&s, metas(&[4, 1, 8, 1], &[4, 1, 7, 1], 16));
    assert!(e.contains("port Page_table_V must be"), "{e}");
    let e = err(&s, metas(&[4, 1, 8, 1], &[4, 1, 8, 1], 32));
    assert!(
        e.contains(
            "page sizes differ: the K pool is [100, 8, 16, 128] and the V pool is [100, 8, 32, 128], so K[2] = 16 must \
             equal V[2] = 32"
        ),
        "{e}"
    );
    let mut m = metas(&[4, 1, 8, 1], &[4, 1, 8, 1], 16);
    m[5].dtype = DataType::I64;
    assert!(err(&s, m).contains("port Page_table_K is i64 but must be i32"));
    // The capacity given: the tables must be exactly wide enough.
    let capped = Sdpa { max_seq_len_kv: Some(100), ..s.clone() };
    assert!(infer(&capped, &metas(&[4, 1, 7, 1], &[4, 1, 7, 1], 16)).is_ok());
    // A capacity near i64::MAX is an error, not an overflow: too many scores for 4 × 32 rows,
    // and for one row of one head a table far too narrow.
    let huge = Sdpa { max_seq_len_kv: Some(i64::MAX), ..s.clone() };
    let e = err(&huge, metas(&[4, 1, 8, 1], &[4, 1, 8, 1], 16));
    assert!(e.contains("give attention scores [4, 32, 1, 9223372036854775807] of more than i64::MAX"), "{e}");
    let mut one_row = metas(&[1, 1, 8, 1], &[1, 1, 8, 1], 16);
    one_row[0].dims = vec![1, 1, 1, 128];
    one_row[1].dims = vec![100, 1, 16, 128];
    one_row[2].dims = vec![100, 1, 16, 128];
    for len in [3, 4] {
        one_row[len].dims = vec![1, 1, 1, 1];
    }
    let e = err(&huge, one_row);
    assert!(e.contains("needs ceil(9223372036854775807 / 16) = 576460752303423488 entries"), "{e}");
    let e = err(&capped, metas(&[4, 1, 8, 1], &[4, 1, 8, 1], 16));
    assert!(e.contains("`max_seq_len_kv = 100` over pages of 16 tokens needs ceil(100 / 16) = 7 entries"), "{e}");
    // Attribute rules.
    let e = Op::from_call("sdpa", &[("paged".into(), true.into())]).map(|o| o.infer(&metas(&[4, 1, 8, 1], &[4, 1, 8, 1], 16)[..5], &mut Concrete));
    let e = match e {
        Ok(Err(e)) => e.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(e.contains("a paged cache needs the per-sequence lengths: add `padding_mask = true`"), "{e}");
    let e = err(&Sdpa { max_seq_len_kv: Some(64), paged: false, ..s.clone() }, metas(&[4, 1, 8, 1], &[4, 1, 8, 1], 16)[..5].to_vec());
    assert!(e.contains("`max_seq_len_kv = 64` bounds the keys of a paged cache; add `paged = true`"), "{e}");
    let e = Op::from_call("sdpa_backward", &[("paged".into(), true.into())]).unwrap_err().to_string();
    assert!(e.contains("has no attribute `paged`"), "{e}");
    // Symbolic tables: the capacity is T · page.
    let mut cx = Symbolic::default();
    let sym = |n: &str| SymDim::Param(n.into());
    let m: Vec<TensorMeta<SymDim>> = vec![
        TensorMeta { dims: vec![sym("B"), SymDim::Lit(32), SymDim::Lit(1), SymDim::Lit(128)], dtype: DataType::BF16 },
        TensorMeta { dims: vec![sym("P"), SymDim::Lit(8), SymDim::Lit(16), SymDim::Lit(128)], dtype: DataType::BF16 },
        TensorMeta { dims: vec![sym("P"), SymDim::Lit(8), SymDim::Lit(16), SymDim::Lit(128)], dtype: DataType::BF16 },
        TensorMeta { dims: vec![sym("B"), SymDim::Lit(1), SymDim::Lit(1), SymDim::Lit(1)], dtype: DataType::I32 },
        TensorMeta { dims: vec![sym("B"), SymDim::Lit(1), SymDim::Lit(1), SymDim::Lit(1)], dtype: DataType::I32 },
        TensorMeta { dims: vec![sym("B"), SymDim::Lit(1), sym("T"), SymDim::Lit(1)], dtype: DataType::I32 },
        TensorMeta { dims: vec![sym("B"), SymDim::Lit(1), sym("T"), SymDim::Lit(1)], dtype: DataType::I32 },
    ];
    let out = Op::Sdpa(s.clone()).infer(&m, &mut cx).unwrap();
    assert_eq!(out[0].dims[0], sym("B"));
}

#[test]
fn paged_reference_is_the_dense_reference_over_the_pages() {
    let mut rng = Rng(0x9a9e_d00d);
    let configs: Vec<Vec<(&str, AttrValue)>> = vec![
        vec![],
        vec![("training", true.into())],
        vec![("causal", true.into()), ("alignment", "bottom_right".into())],
        vec![("window", 5.into()), ("causal", true.into()), ("alignment", "bottom_right".into())],
        vec![("scale", 0.3.into())],
    ];
    // Decode (S_q = 1) and multi-token queries, GQA and MQA, pages of 4 and 8.
    for attrs in &configs {
        for (shape, page) in [([3, 4, 2, 1, 16, 8], 4), ([2, 6, 1, 3, 16, 8], 8), ([1, 2, 2, 5, 24, 16], 4)] {
            let (paged, dense) = paged_case(&mut rng, attrs, shape, page, 3);
            let got = Op::Sdpa(paged.op.clone()).reference(&refs(&paged.inputs)).unwrap();
            let want = dense.op.reference(&refs(&dense.inputs));
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.dims, w.dims);
                // The same arithmetic on the same values: equal to the bit.
                assert_eq!(g.data, w.data, "{attrs:?} {shape:?} page {page}");
            }
        }
    }
}

#[test]
fn paged_composite_computes_the_reference() {
    let mut rng = Rng(0x5eed_9a9e);
    for attrs in [vec![], vec![("training", true.into())], vec![("causal", true.into()), ("alignment", "bottom_right".into())]] {
        for (shape, page) in [([3, 4, 2, 1, 16, 8], 4), ([2, 4, 4, 3, 16, 8], 8)] {
            let (paged, _) = paged_case(&mut rng, &attrs, shape, page, 2);
            let want = paged.op.reference(&refs(&paged.inputs));
            let x = expand_case(&paged, &want, 91900);
            let loads: Vec<&str> =
                x.ops.iter().filter(|(_, o)| matches!(o, SubOp::PagedCacheLoad { .. })).map(|(n, _)| *n).collect();
            assert_eq!(loads, ["paged_k_cache_operation", "paged_v_cache_operation"]);
            let got = run(&x, &refs(&paged.inputs), want.len(), false);
            let live = live_rows(&paged);
            assert_close(&format!("O {attrs:?} {shape:?}"), &got[0], &want[0], Some((&live, shape[5] as usize)), 1e-7);
        }
    }
}

#[test]
fn page_table_values_are_checked_before_anything_reads_them() {
    let mut rng = Rng(77);
    let (mut paged, _) = paged_case(&mut rng, &[], [3, 4, 2, 1, 16, 8], 4, 1);
    let o = Op::Sdpa(paged.op.clone());
    let table = paged.op.input_index("Page_table_K").unwrap();
    // 3 sequences × 4 slots + 1 spare: pages 0..13.
    paged.inputs[table].data[6] = 13.0;
    let e = o.reference(&refs(&paged.inputs)).unwrap_err().to_string();
    assert!(e.contains("Page_table_K[1, 0, 2, 0] = 13 names no page of the K pool, which has 13 pages (0..13); sequence 1, slot 2"), "{e}");
    paged.inputs[table].data[6] = -1.0;
    assert!(o.reference(&refs(&paged.inputs)).is_err());
    paged.inputs[table].data[6] = 0.0;
    let lens = paged.op.input_index("SEQ_LEN_KV").unwrap();
    paged.inputs[lens].data[2] = 17.0;
    let e = o.reference(&refs(&paged.inputs)).unwrap_err().to_string();
    assert!(e.contains("SEQ_LEN_KV[2] = 17 is outside 0..=16 (the cache's capacity); sequence 2"), "{e}");
}

#[test]
fn paged_attributes_round_trip() {
    let attrs: Vec<(&str, AttrValue)> =
        vec![("padding_mask", true.into()), ("paged", true.into()), ("max_seq_len_kv", 100.into())];
    let o = Op::Sdpa(op("sdpa", &attrs));
    assert_eq!(Op::from_call("sdpa", &o.call_attrs()).unwrap(), o);
}

/// Packs each padded `[B, H, S, D]` array `a` at the offsets `offsets` (the exclusive prefix sum
/// of `lens` times `H·D`), into a THD buffer whose storage no sequence owns holds 7.0 (never
/// read). Returns the packed array and the offsets.
fn packed_with(a: &Array, lens: &Array) -> (Array, Array) {
    let [b, h, _, d] = <[i64; 4]>::try_from(a.dims.as_slice()).unwrap();
    let mut offsets = vec![0.0];
    for seq in 0..b as usize {
        offsets.push(offsets[seq] + lens.data[seq] * (h * d) as f64);
    }
    let offsets = Array { dims: vec![b + 1, 1, 1, 1], data: offsets };
    let dims = <[i64; 4]>::try_from(a.dims.as_slice()).unwrap();
    let mut packed = ragged::pack(a, dims, &offsets, lens);
    let owned = ragged::pack(&Array::from_fn(&a.dims, |_| 1.0), dims, &offsets, lens);
    for (v, o) in packed.data.iter_mut().zip(&owned.data) {
        if *o == 0.0 {
            *v = 7.0;
        }
    }
    (packed, offsets)
}

/// A ragged case and its padded twin: the padded case `shape` (`[b, h_q, h_kv, s_q, s_kv, d]`,
/// padding mask, lengths `lens_q`, `lens_kv`), and the same sequences packed.
fn ragged_case(rng: &mut Rng, attrs: &[(&str, AttrValue)], shape: [i64; 6], lens: (&[i64], &[i64])) -> (Case, Case) {
    let [b, ..] = shape;
    let mut dense_attrs = attrs.to_vec();
    dense_attrs.push(("padding_mask", true.into()));
    let mut dense = case(rng, op("sdpa", &dense_attrs), shape);
    let to_lens = |l: &[i64]| Array { dims: vec![b, 1, 1, 1], data: l.iter().map(|&n| n as f64).collect() };
    let (seq_q, seq_kv) = (to_lens(lens.0), to_lens(lens.1));
    dense.inputs[dense.op.input_index("SEQ_LEN_Q").unwrap()] = seq_q.clone();
    dense.inputs[dense.op.input_index("SEQ_LEN_KV").unwrap()] = seq_kv.clone();
    let mut ragged_attrs = dense_attrs.clone();
    ragged_attrs.push(("ragged", true.into()));
    let ragged_op = op("sdpa", &ragged_attrs);
    let (q, off_q) = packed_with(&dense.inputs[0], &seq_q);
    let (k, off_k) = packed_with(&dense.inputs[1], &seq_kv);
    let (v, off_v) = packed_with(&dense.inputs[2], &seq_kv);
    let o_dims = [b, shape[1], shape[3], shape[5]];
    let (_, off_o) = packed_with(&Array::zeros(&o_dims), &seq_q);
    let inputs = ragged_op
        .inputs()
        .iter()
        .map(|p| match p.name {
            "Q" => q.clone(),
            "K" => k.clone(),
            "V" => v.clone(),
            "Ragged_offset_Q" => off_q.clone(),
            "Ragged_offset_K" => off_k.clone(),
            "Ragged_offset_V" => off_v.clone(),
            "Ragged_offset_O" => off_o.clone(),
            other => dense.inputs[dense.op.input_index(other).unwrap()].clone(),
        })
        .collect();
    (Case { op: ragged_op, inputs }, dense)
}

/// Asserts `packed` (at `offsets`) holds `padded` on the rows within `lens`, to the bit.
fn assert_packs(what: &str, packed: &Array, offsets: &Array, lens: &Array, padded: &Array) {
    let dims = <[i64; 4]>::try_from(padded.dims.as_slice()).unwrap();
    let [b, h, s, d] = dims;
    let got = ragged::unpack(packed, dims, offsets, lens);
    let mut live = 0;
    for seq in 0..b {
        for row in 0..lens.data[seq as usize] as i64 {
            for head in 0..h {
                for x in 0..d {
                    let i = (((seq * h + head) * s + row) * d + x) as usize;
                    assert_eq!(got.data[i], padded.data[i], "{what}: sequence {seq}, head {head}, row {row}, dim {x}");
                    live += 1;
                }
            }
        }
    }
    assert!(live > 0, "{what}: nothing compared");
}

#[test]
fn ragged_ports_and_shapes() {
    let s = op("sdpa", &[("padding_mask", true.into()), ("ragged", true.into())]);
    let names: Vec<&str> = s.inputs().iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        ["Q", "K", "V", "SEQ_LEN_Q", "SEQ_LEN_KV", "Ragged_offset_Q", "Ragged_offset_K", "Ragged_offset_V", "Ragged_offset_O"]
    );
    // Over a paged cache only Q and O are packed.
    let p = op("sdpa", &[("padding_mask", true.into()), ("ragged", true.into()), ("paged", true.into())]);
    let names: Vec<&str> = p.inputs().iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        ["Q", "K", "V", "SEQ_LEN_Q", "SEQ_LEN_KV", "Page_table_K", "Page_table_V", "Ragged_offset_Q", "Ragged_offset_O"]
    );
    let packed: Vec<&str> = ragged::packed(&p).iter().map(|t| t.port).collect();
    assert_eq!(packed, ["Q", "O"]);
    let bw = op("sdpa_backward", &[("padding_mask", true.into()), ("ragged", true.into())]);
    let packed: Vec<(&str, &str)> = ragged::packed(&bw).iter().map(|t| (t.port, t.offsets)).collect();
    assert_eq!(
        packed,
        [
            ("Q", "Ragged_offset_Q"),
            ("K", "Ragged_offset_K"),
            ("V", "Ragged_offset_V"),
            ("O", "Ragged_offset_O"),
            ("dO", "Ragged_offset_O"),
            ("dQ", "Ragged_offset_Q"),
            ("dK", "Ragged_offset_K"),
            ("dV", "Ragged_offset_V")
        ]
    );
    let metas = |off: &[i64], dtype: DataType| {
        let mut m = qkv(4, 8, 2, 64, 64, 64);
        m.push(meta(&[4, 1, 1, 1], DataType::I32));
        m.push(meta(&[4, 1, 1, 1], DataType::I32));
        for _ in 0..4 {
            m.push(meta(off, dtype));
        }
        m
    };
    assert!(infer(&s, &metas(&[5, 1, 1, 1], DataType::I32)).is_ok());
    assert!(infer(&s, &metas(&[5, 1, 1, 1], DataType::I64)).is_ok());
    let e = infer(&s, &metas(&[4, 1, 1, 1], DataType::I32)).unwrap_err().to_string();
    assert!(e.contains("port Ragged_offset_Q must be [B + 1, 1, 1, 1] = [5, 1, 1, 1], found [4, 1, 1, 1]"), "{e}");
    let e = infer(&s, &metas(&[5, 1, 1, 1], DataType::F32)).unwrap_err().to_string();
    assert!(e.contains("port Ragged_offset_Q is f32 but must be i32 or i64"), "{e}");
    let mut mixed = metas(&[5, 1, 1, 1], DataType::I32);
    mixed[6].dtype = DataType::I64;
    let e = infer(&s, &mixed).unwrap_err().to_string();
    assert!(e.contains("port Ragged_offset_K is i64 but Ragged_offset_Q is i32: one node's ragged offsets have one type"), "{e}");
    // The attribute rules, spanned on `ragged`.
    let no_mask = op("sdpa", &[("ragged", true.into())]);
    let e = no_mask.check_attributes().unwrap_err();
    assert_eq!(e.attr, Some("ragged"));
    assert!(e.to_string().contains("packed (ragged) sequences need their lengths: add `padding_mask = true`"), "{e}");
    let fp8 = Sdpa { fp8: Some(DataType::Fp8E4M3), ..s.clone() };
    assert!(fp8.check_attributes().unwrap_err().to_string().contains("does not lower fp8 attention over packed"));
    // Symbolic: the offsets are [B + 1, 1, 1, 1] over a `dyn B`.
    let mut cx = Symbolic::default();
    let sym = |n: &str| SymDim::Param(n.into());
    let four = |a: SymDim, b: i64, c: SymDim, d: i64| vec![a, SymDim::Lit(b), c, SymDim::Lit(d)];
    let bf = |dims| TensorMeta { dims, dtype: DataType::BF16 };
    let int = |dims| TensorMeta { dims, dtype: DataType::I32 };
    let b1 = sym("B").checked_add(&SymDim::Lit(1)).unwrap();
    let mut m = vec![
        bf(four(sym("B"), 8, sym("S"), 64)),
        bf(four(sym("B"), 8, sym("S"), 64)),
        bf(four(sym("B"), 8, sym("S"), 64)),
        int(four(sym("B"), 1, SymDim::Lit(1), 1)),
        int(four(sym("B"), 1, SymDim::Lit(1), 1)),
    ];
    m.extend(std::iter::repeat_n(int(four(b1, 1, SymDim::Lit(1), 1)), 4));
    assert!(Op::Sdpa(s.clone()).infer(&m, &mut cx).is_ok());
    m[5] = int(four(sym("B"), 1, SymDim::Lit(1), 1));
    let e = Op::Sdpa(s.clone()).infer(&m, &mut Symbolic::default()).unwrap_err().to_string();
    assert!(e.contains("port Ragged_offset_Q must be [B + 1, 1, 1, 1]"), "{e}");
}

#[test]
fn ragged_reference_is_the_padded_reference_over_the_packed_sequences() {
    let mut rng = Rng(0x7a99_ed00);
    let configs: Vec<Vec<(&str, AttrValue)>> = vec![
        vec![],
        vec![("training", true.into())],
        vec![("causal", true.into())],
        vec![("causal", true.into()), ("alignment", "bottom_right".into())],
        vec![("window", 3.into()), ("causal", true.into()), ("alignment", "bottom_right".into())],
        vec![("bias", true.into()), ("scale", 0.3.into())],
        vec![("dropout", 0.25.into())],
    ];
    // Mixed lengths, an empty sequence, GQA, S_q != S_kv, D_qk != D_v is not possible here
    // (one d): covered by the graph-level tests.
    let shapes: [([i64; 6], &[i64], &[i64]); 3] = [
        ([3, 4, 2, 6, 6, 8], &[6, 2, 5], &[6, 2, 5]),
        ([4, 2, 2, 5, 7, 8], &[1, 5, 0, 3], &[7, 3, 1, 4]),
        ([2, 6, 3, 4, 9, 16], &[4, 1], &[9, 6]),
    ];
    for attrs in &configs {
        for (shape, lq, lkv) in shapes {
            let (ragged, dense) = ragged_case(&mut rng, attrs, shape, (lq, lkv));
            let got = Op::Sdpa(ragged.op.clone()).reference(&refs(&ragged.inputs)).unwrap();
            let want = dense.op.reference(&refs(&dense.inputs));
            assert_eq!(got.len(), want.len());
            let at = |p: &str| &ragged.inputs[ragged.op.input_index(p).unwrap()];
            let what = format!("{attrs:?} {shape:?}");
            assert_packs(&format!("O {what}"), &got[0], at("Ragged_offset_O"), at("SEQ_LEN_Q"), &want[0]);
            if got.len() > 1 {
                // Stats stay padded: equal on every row of the sequences.
                let lens = at("SEQ_LEN_Q");
                let [b, h, s, _] = <[i64; 4]>::try_from(want[1].dims.as_slice()).unwrap();
                for i in 0..(b * h * s) as usize {
                    if (i as i64 % s) < lens.data[i / (h * s) as usize] as i64 {
                        assert_eq!(got[1].data[i], want[1].data[i], "Stats {what} row {i}");
                    }
                }
            }
            // Storage no sequence owns is not written.
            let owned = ragged::pack(&Array::from_fn(&want[0].dims, |_| 1.0), <[i64; 4]>::try_from(want[0].dims.as_slice()).unwrap(), at("Ragged_offset_O"), at("SEQ_LEN_Q"));
            assert!(got[0].data.iter().zip(&owned.data).all(|(g, o)| *o == 1.0 || *g == 0.0), "{what}");
        }
    }
}

#[test]
fn ragged_backward_is_the_padded_backward_over_the_packed_sequences() {
    let mut rng = Rng(0xbac4_7a99);
    for attrs in [vec![], vec![("causal", true.into())], vec![("bias", true.into())], vec![("dropout", 0.2.into())]] {
        for (shape, lq, lkv) in [([3, 4, 2, 6, 6, 8], &[6, 2, 5][..], &[6, 2, 5][..]), ([2, 4, 4, 5, 7, 8], &[3, 5], &[7, 2])] {
            let (ragged_fwd, dense_fwd) = ragged_case(&mut rng, &attrs, shape, (lq, lkv));
            let [b, h_q, _, s_q, _, d] = shape;
            let d_o = rng.array(&[b, h_q, s_q, d]);
            let dense = backward_of(&dense_fwd, &d_o, true);
            let want = dense.op.reference(&refs(&dense.inputs));
            // The packed backward: Q, K, V, O, dO packed, Stats padded, the same offsets.
            let at = |c: &Case, p: &str| c.inputs[c.op.input_index(p).unwrap()].clone();
            let seq_q = at(&ragged_fwd, "SEQ_LEN_Q");
            let (o, _) = packed_with(&dense.inputs[3], &seq_q);
            let (d_o, _) = packed_with(&d_o, &seq_q);
            let bw = Sdpa { pass: SdpaPass::Backward, d_bias: ragged_fwd.op.bias, ..ragged_fwd.op.clone() };
            let inputs: Vec<Array> = bw
                .inputs()
                .iter()
                .map(|p| match p.name {
                    "O" => o.clone(),
                    "dO" => d_o.clone(),
                    "Stats" => dense.inputs[5].clone(),
                    other => at(&ragged_fwd, other),
                })
                .collect();
            let got = Op::Sdpa(bw.clone()).reference(&refs(&inputs)).unwrap();
            let what = format!("{attrs:?} {shape:?}");
            let input = |p: &str| &inputs[bw.input_index(p).unwrap()];
            for (i, (grad, off, lens)) in
                [("dQ", "Ragged_offset_Q", "SEQ_LEN_Q"), ("dK", "Ragged_offset_K", "SEQ_LEN_KV"), ("dV", "Ragged_offset_V", "SEQ_LEN_KV")]
                    .into_iter()
                    .enumerate()
            {
                assert_packs(&format!("{grad} {what}"), &got[i], input(off), input(lens), &want[i]);
            }
            if bw.d_bias {
                assert_eq!(got[3].data, want[3].data, "dBias {what}");
            }
        }
    }
}

#[test]
fn ragged_offsets_are_checked_before_anything_reads_them() {
    let mut rng = Rng(78);
    let (mut c, _) = ragged_case(&mut rng, &[], [3, 2, 2, 4, 4, 8], (&[4, 2, 3], &[4, 2, 3]));
    let o = Op::Sdpa(c.op.clone());
    assert!(o.reference(&refs(&c.inputs)).is_ok());
    let off = c.op.input_index("Ragged_offset_K").unwrap();
    let good = c.inputs[off].clone();
    let err = |c: &Case| o.reference(&refs(&c.inputs)).unwrap_err().to_string();
    // Token = H·D = 16 elements; offsets 0, 64, 96, 144; capacity 3·4·16 = 192.
    assert_eq!(good.data, [0.0, 64.0, 96.0, 144.0]);
    c.inputs[off].data[1] = 48.0;
    let e = err(&c);
    assert!(
        e.contains(
            "sequence 0 of K runs from Ragged_offset_K[0] = 0 for SEQ_LEN_KV[0] = 4 tokens of 16 elements to 64, past \
             Ragged_offset_K[1] = 48, where the next one starts"
        ),
        "{e}"
    );
    c.inputs[off].data[1] = 72.0;
    let e = err(&c);
    assert!(e.contains("Ragged_offset_K[1] = 72 is not a whole number of K tokens of H·D = 16 elements; sequence 1"), "{e}");
    c.inputs[off].data = vec![0.0, 64.0, 96.0, 208.0];
    let e = err(&c);
    assert!(e.contains("Ragged_offset_K[3] = 208 is outside the packed K buffer: offsets of K are within 0..=192"), "{e}");
    c.inputs[off].data = vec![-16.0, 64.0, 96.0, 144.0];
    assert!(err(&c).contains("Ragged_offset_K[0] = -16 is outside"));
    // A gap between sequences is fine; so is a sequence at the very end.
    c.inputs[off].data = vec![0.0, 80.0, 112.0, 192.0];
    let len = c.op.input_index("SEQ_LEN_KV").unwrap();
    c.inputs[len].data = vec![4.0, 2.0, 4.0];
    // Q's and O's offsets still say 3 tokens for sequence 2: only K's and V's move.
    let off_v = c.op.input_index("Ragged_offset_V").unwrap();
    c.inputs[off_v].data = vec![0.0, 64.0, 96.0, 160.0];
    assert!(o.reference(&refs(&c.inputs)).is_ok(), "{:?}", o.reference(&refs(&c.inputs)).err());
    c.inputs[len].data = vec![4.0, 2.0, 5.0];
    let e = err(&c);
    assert!(e.contains("SEQ_LEN_KV[2] = 5 is outside 0..=4 (S_kv, the keys); sequence 2 of a packed batch"), "{e}");
    c.inputs[len].data = vec![4.0, 2.0, 4.0];
    c.inputs[off].data = good.data.clone();
    let e = err(&c);
    assert!(e.contains("sequence 2 of K runs from Ragged_offset_K[2] = 96 for SEQ_LEN_KV[2] = 4 tokens"), "{e}");
}

/// `max_total_seq_len_q`/`_kv` bound the packed tokens: only with `ragged`, at least 1, at most
/// `B·S`, never the keys of a paged cache; the offsets then stay within `T·H·D`; each port's
/// bound is the one of its rows (queries or keys).
#[test]
fn bounds_on_the_packed_tokens_are_checked_and_bound_the_offsets() {
    let mut rng = Rng(79);
    // [B = 3, S = 4]: 9 query and 9 key tokens, bounded at 9 and 10 (the padded 12).
    let (mut c, _) = ragged_case(&mut rng, &[], [3, 2, 2, 4, 4, 8], (&[4, 2, 3], &[4, 2, 3]));
    c.op.max_total_seq_len_q = Some(9);
    c.op.max_total_seq_len_kv = Some(10);
    let o = Op::Sdpa(c.op.clone());
    assert!(o.reference(&refs(&c.inputs)).is_ok());
    let ports: Vec<(&str, Option<i64>)> = o.ragged_ports().iter().map(|p| (p.port, p.tokens)).collect();
    assert_eq!(ports, [("Q", Some(9)), ("K", Some(10)), ("V", Some(10)), ("O", Some(9))]);
    // Token = H·D = 16 elements: K's offsets within 0..=10·16 = 160 (the padded 192 no longer).
    let off = c.op.input_index("Ragged_offset_K").unwrap();
    c.inputs[off].data = vec![0.0, 64.0, 96.0, 176.0];
    let e = o.reference(&refs(&c.inputs)).unwrap_err().to_string();
    assert!(
        e.contains(
            "Ragged_offset_K[3] = 176 is outside the packed K buffer: offsets of K are within 0..=160 \
             (max_total_seq_len_kv·H·D elements)"
        ),
        "{e}"
    );
    // The rules, spanned on the attribute.
    let ragged = [("padding_mask", AttrValue::from(true)), ("ragged", true.into())];
    let with = |name: &str, extra: &[(&str, AttrValue)]| {
        let attrs: Vec<(&str, AttrValue)> = ragged.iter().cloned().chain(extra.iter().cloned()).collect();
        op(name, &attrs)
    };
    let e = op("sdpa", &[("max_total_seq_len_q", 8.into())]).check_attributes().unwrap_err();
    assert_eq!(e.attr, Some("max_total_seq_len_q"));
    assert!(e.to_string().contains("`max_total_seq_len_q = 8` bounds the tokens of packed sequences; add `ragged = true`"));
    let e = with("sdpa_backward", &[("max_total_seq_len_kv", 0.into())]).check_attributes().unwrap_err();
    assert!(e.to_string().contains("`max_total_seq_len_kv` must be at least 1, found 0"), "{e}");
    let e = with("sdpa", &[("paged", true.into()), ("max_total_seq_len_kv", 64.into())]).check_attributes().unwrap_err();
    assert!(e.to_string().contains("over a paged cache the keys are in page pools, not packed"), "{e}");
    assert!(with("sdpa", &[("paged", true.into()), ("max_total_seq_len_q", 64.into())]).check_attributes().is_ok());
    // At most B·S: [B = 4, S = 64] holds 256 query tokens.
    let metas = |s: &Sdpa| {
        let mut m = qkv(4, 8, 2, 64, 64, 64);
        m.push(meta(&[4, 1, 1, 1], DataType::I32));
        m.push(meta(&[4, 1, 1, 1], DataType::I32));
        m.extend((0..s.inputs().len() - 5).map(|_| meta(&[5, 1, 1, 1], DataType::I32)));
        m
    };
    let fits = with("sdpa", &[("max_total_seq_len_q", 256.into())]);
    assert!(infer(&fits, &metas(&fits)).is_ok());
    let past = with("sdpa", &[("max_total_seq_len_q", 257.into())]);
    let e = infer(&past, &metas(&past)).unwrap_err();
    assert_eq!(e.attr, Some("max_total_seq_len_q"));
    assert!(e.to_string().contains("`max_total_seq_len_q = 257` is more than B·S_q = 4·64 = 256"), "{e}");
    // And they round-trip through the call attributes.
    let o = Op::Sdpa(with("sdpa_backward", &[("max_total_seq_len_q", 100.into()), ("max_total_seq_len_kv", 7.into())]));
    assert_eq!(Op::from_call("sdpa_backward", &o.call_attrs()).unwrap(), o);
}

#[test]
fn ragged_attributes_round_trip() {
    for name in ["sdpa", "sdpa_backward"] {
        let o = Op::Sdpa(op(name, &[("padding_mask", true.into()), ("ragged", true.into())]));
        assert_eq!(Op::from_call(name, &o.call_attrs()).unwrap(), o);
    }
}

#[test]
fn ragged_support_rules_name_the_target() {
    use super::support::{check, Problem, Target};
    let fwd = op("sdpa", &[("padding_mask", true.into()), ("ragged", true.into())]);
    let bwd = op("sdpa_backward", &[("padding_mask", true.into()), ("ragged", true.into())]);
    let p = Problem { b: 2, h_q: 8, h_k: 2, h_v: 2, s_q: 128, s_kv: 128, d_qk: 64, d_v: 64, compute_f32: true };
    let rule = |op: &Sdpa, version: usize, sm: u32| check(op, &p, Target { version, sm: Some(sm) }).err().map(|f| f.rule);
    assert_eq!(rule(&fwd, 91900, 90), None);
    assert_eq!(rule(&fwd, 91800, 80), Some("sdpa.ragged.sm90"));
    assert_eq!(rule(&fwd, 91900, 80), None);
    assert_eq!(rule(&bwd, 90500, 90), Some("sdpa.ragged.gqa_backward"));
    let deterministic = Sdpa { deterministic: true, ..bwd.clone() };
    assert_eq!(rule(&deterministic, 91900, 86), Some("sdpa.ragged.deterministic"));
    assert_eq!(rule(&deterministic, 91900, 90), None);
    let d_bias = Sdpa { bias: true, d_bias: true, ..bwd.clone() };
    assert_eq!(rule(&d_bias, 91900, 100), Some("sdpa.ragged.d_bias_blackwell"));
    let paged = Sdpa { paged: true, ..fwd.clone() };
    assert_eq!(rule(&paged, 90600, 90), Some("sdpa.ragged.paged"));
    // Not ragged: none of these.
    let plain = Sdpa { ragged: false, deterministic: true, ..bwd };
    assert_eq!(rule(&plain, 91900, 86), None);
}
