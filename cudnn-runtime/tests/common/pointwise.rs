//! One graph per cuDNN pointwise mode, its inputs drawn from the mode's domain: shared by the
//! deviceless planning test and the GPU numerics test, so both cover exactly
//! [`PointwiseMode::ALL`].

use cudnn_runtime::ops::{AttrValue, PointwiseMode};
use cudnn_runtime::reference::HostSlice;
use cudnn_runtime::{DataType, Graph, GraphBuilder};

/// The dims of every input and output.
pub const DIMS: [i64; 2] = [16, 128];
const LEN: usize = 16 * 128;

/// A graph input's values.
pub enum Values {
    F32(Vec<f32>),
    Bool(Vec<bool>),
}

impl Values {
    /// The values as the reference engine takes them.
    pub fn host(&self) -> HostSlice<'_> {
        match self {
            Values::F32(v) => v.as_slice().into(),
            Values::Bool(v) => v.as_slice().into(),
        }
    }
}

/// One mode's graph `y = mode(inputs..)` and its inputs, in graph-input order.
pub struct ModeCase {
    pub mode: PointwiseMode,
    pub graph: Graph,
    pub inputs: Vec<(String, Values)>,
    /// The output's type: f32, or bool for comparisons and logical ops, i32 for `gen_index`.
    pub output: DataType,
}

/// Every mode's case.
pub fn cases() -> Vec<ModeCase> {
    PointwiseMode::ALL.iter().enumerate().map(|(i, &mode)| case(mode, i as u64)).collect()
}

fn case(mode: PointwiseMode, seed: u64) -> ModeCase {
    let name = mode.name();
    let logical = name.starts_with("logical_");
    let output = if name.starts_with("cmp_") || logical {
        DataType::Bool
    } else if name == "gen_index" {
        DataType::I32
    } else {
        DataType::F32
    };
    let mut inputs: Vec<(String, Values)> = Vec::new();
    for port in 0..mode.arity() {
        let values = if logical || (name == "binary_select" && port == 2) {
            Values::Bool(uniform_f32(seed * 8 + port as u64, 0.0, 1.0).into_iter().map(|v| v < 0.5).collect())
        } else {
            let (lo, hi) = domain(name, port);
            let mut v = uniform_f32(seed * 8 + port as u64, lo, hi);
            if name.starts_with("cmp_") && port == 1 {
                // Ties, so equality and the inclusive comparisons see both outcomes.
                let Values::F32(a) = &inputs[0].1 else { unreachable!() };
                v.iter_mut().zip(a).step_by(4).for_each(|(b, a)| *b = *a);
            }
            Values::F32(v)
        };
        inputs.push((format!("in{port}"), values));
    }
    let mut g = GraphBuilder::new(format!("pointwise_{name}"));
    let ids: Vec<_> = inputs
        .iter()
        .map(|(n, v)| {
            let dt = if matches!(v, Values::Bool(_)) { DataType::Bool } else { DataType::F32 };
            g.input(n, dt, &DIMS).unwrap().into()
        })
        .collect();
    let y = g.op(name, &ids, &attrs(name)).unwrap_or_else(|e| panic!("{name}: {e}"))[0];
    g.output(y, "y", output).unwrap();
    ModeCase { mode, graph: g.build().unwrap_or_else(|e| panic!("{name}: {e}")), inputs, output }
}

/// Parameters away from cuDNN's defaults, so the lowering of each is exercised.
fn attrs(name: &str) -> Vec<(String, AttrValue)> {
    let f = |k: &str, v: f64| (k.to_string(), AttrValue::Float(v));
    match name.trim_end_matches("_bwd") {
        "relu" => vec![f("lower_clip_slope", 0.1), f("upper_clip", 1.5)],
        "elu" => vec![f("alpha", 0.5)],
        "softplus" => vec![f("beta", 2.0)],
        "swish" => vec![f("beta", 1.5)],
        "gen_index" => vec![("axis".to_string(), AttrValue::Int(1))],
        _ => Vec::new(),
    }
}

/// Where each port's values are drawn from: inside the mode's domain, away from its poles.
fn domain(name: &str, port: usize) -> (f64, f64) {
    match (name, port) {
        ("log" | "sqrt" | "rsqrt", _) => (0.25, 4.0),
        ("pow", 0) => (0.5, 2.0),
        ("div" | "mod", 1) | ("reciprocal", 0) => (0.5, 2.0),
        ("mod", 0) | ("ceil" | "floor", _) => (-4.0, 4.0),
        ("tan", _) => (-1.2, 1.2),
        (n, 0) if n.ends_with("_bwd") => (-1.0, 1.0),
        _ => (-2.0, 2.0),
    }
}

/// The mode's input values: [`super::random`] as f32.
fn uniform_f32(seed: u64, lo: f64, hi: f64) -> Vec<f32> {
    super::random(seed, LEN, lo, hi).into_iter().map(|v| v as f32).collect()
}
