//! The builder target's input: a program of [`GraphBuilder`] calls decoded from fuzzer bytes
//! ([`Program::decode`], through `arbitrary::Unstructured`), and the inverse
//! ([`Program::encode`]), so that seeds are real graphs ([`Program::of_graph`]) written in the
//! very format the fuzzer mutates.
//!
//! Every choice is one byte, and the common case is the cheap one: a dim byte below `0xe0` is a
//! small number, a count byte below `0x80` means "what this op expects". Rare bytes reach the
//! extremes (`i64::MIN`, huge dims, NaN scalars, unknown tensor ids, wrong attribute kinds), so
//! the fuzzer gets both deep programs and hostile values.

use arbitrary::Unstructured;
use cudnn_runtime::ops::{self, AttrKind, AttrValue, Op};
use cudnn_runtime::{Context, DataType, Graph, GraphBuilder, Operand, TensorId};

/// The most steps a program runs (more bytes are ignored): enough to rebuild a graph of 40
/// tensors with every stride and uid set, few enough that one execution stays fast.
pub const MAX_STEPS: usize = 160;

/// The longest list (dims, strides, attribute lists, dim orders) a program holds: past
/// [`cudnn_runtime::serialize::MAX_RANK`] so the rank limits are reached.
const MAX_LIST: u8 = 18;

/// The most inputs an op call gets: past `concatenate`'s 32.
const MAX_INPUTS: u8 = 34;

/// Tensor references at or above this byte name ids no builder made.
const BOGUS_TENSOR: u8 = 0xe0;

/// Operand bytes at or above this are by-value scalars.
const SCALAR: u8 = 0xf0;

/// Values that the one-byte encodings cannot write and that break arithmetic most often.
const SPECIAL_INTS: [i64; 16] = [
    i64::MIN,
    i64::MAX,
    i64::MIN + 1,
    i64::MAX - 1,
    i32::MIN as i64,
    i32::MAX as i64,
    u32::MAX as i64,
    1 << 31,
    1 << 32,
    1 << 40,
    1 << 48,
    1 << 62,
    -(1 << 31),
    -(1 << 62),
    65_536,
    1_000_000_007,
];

const SPECIAL_FLOATS: [f64; 16] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    -0.0,
    f64::MIN_POSITIVE,
    f64::MAX,
    f64::MIN,
    f64::EPSILON,
    5e-324,
    1e-300,
    1e300,
    65_504.0,
    3.0e38,
    1e-8,
    -1e-8,
    1e10,
];

/// One builder call.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// [`GraphBuilder::context`].
    Context {
        /// Intermediate type.
        intermediate: DataType,
        /// Compute type.
        compute: DataType,
    },
    /// [`GraphBuilder::input`], named `in{n}`.
    Input {
        /// Element type.
        dtype: DataType,
        /// Dims, any values.
        dims: Vec<i64>,
    },
    /// [`GraphBuilder::op`].
    Op {
        /// The call name, one of [`ops::all_names`].
        name: &'static str,
        /// Positional inputs.
        inputs: Vec<Arg>,
        /// Attributes, any kinds.
        attrs: Vec<(String, AttrValue)>,
    },
    /// [`GraphBuilder::set_strides`].
    Strides {
        /// The tensor.
        tensor: Ref,
        /// Strides, any values.
        strides: Vec<i64>,
    },
    /// [`GraphBuilder::set_dim_order`].
    DimOrder {
        /// The tensor.
        tensor: Ref,
        /// The order, any values.
        order: Vec<usize>,
    },
    /// [`GraphBuilder::set_uid`].
    Uid {
        /// The tensor.
        tensor: Ref,
        /// The uid, any value.
        uid: i64,
    },
    /// [`GraphBuilder::output`], named `out{n}`.
    Output {
        /// The tensor.
        tensor: Ref,
        /// The output's type.
        dtype: DataType,
    },
}

const STEP_KINDS: u8 = 7;

/// A tensor reference: one the builder made (taken modulo the count made so far, so that
/// mutations stay meaningful) or an id it never made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ref {
    /// The `n`-th tensor made, modulo the count.
    Made(u8),
    /// `TensorId(usize::MAX - n)`.
    Bogus(u8),
}

/// An op operand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    /// A tensor.
    Tensor(Ref),
    /// A by-value scalar.
    Scalar(f64),
}

/// A program: the steps, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Program {
    /// The calls.
    pub steps: Vec<Step>,
}

/// What [`Program::of_graph`] cannot write in the program format.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EncodeError {
    /// Tensor references are one byte.
    #[error("graph `{graph}` has {count} tensors; a program refers to at most {max}")]
    TooManyTensors {
        /// The graph.
        graph: String,
        /// Its tensor count.
        count: usize,
        /// The most a program can refer to.
        max: usize,
    },
    /// A list (dims, strides, attribute) is longer than the format holds.
    #[error("a list of {len} values is longer than the {max} a program holds")]
    ListTooLong {
        /// Its length.
        len: usize,
        /// The most.
        max: usize,
    },
    /// An attribute value of a kind the format cannot write for that attribute.
    #[error("op `{op}` attribute `{attr}` = {value:?} has no encoding")]
    Attr {
        /// The op.
        op: &'static str,
        /// The attribute.
        attr: String,
        /// Its value.
        value: AttrValue,
    },
    /// More steps than [`MAX_STEPS`].
    #[error("graph `{graph}` needs {steps} steps; a program runs at most {max}")]
    TooManySteps {
        /// The graph.
        graph: String,
        /// Steps needed.
        steps: usize,
        /// The most.
        max: usize,
    },
}

// ---------------------------------------------------------------------------------------------
// Decoding

fn byte(u: &mut Unstructured<'_>) -> u8 {
    // An exhausted input reads as zeros, which decode to the cheapest choices.
    u.arbitrary::<u8>().unwrap_or(0)
}

fn raw8(u: &mut Unstructured<'_>) -> [u8; 8] {
    let mut b = [0u8; 8];
    for x in &mut b {
        *x = byte(u);
    }
    b
}

fn int(u: &mut Unstructured<'_>) -> i64 {
    match byte(u) {
        b @ 0..=0xdf => i64::from(b) - 16,
        b @ 0xe0..=0xef => SPECIAL_INTS[usize::from(b - 0xe0)],
        _ => i64::from_le_bytes(raw8(u)),
    }
}

fn float(u: &mut Unstructured<'_>) -> f64 {
    match byte(u) {
        b @ 0..=0xdf => (f64::from(b) - 112.0) / 16.0,
        b @ 0xe0..=0xef => SPECIAL_FLOATS[usize::from(b - 0xe0)],
        _ => f64::from_bits(u64::from_le_bytes(raw8(u))),
    }
}

fn dtype(u: &mut Unstructured<'_>) -> DataType {
    DataType::ALL[usize::from(byte(u)) % DataType::ALL.len()]
}

fn ints(u: &mut Unstructured<'_>) -> Vec<i64> {
    let n = byte(u) % MAX_LIST;
    (0..n).map(|_| int(u)).collect()
}

fn tensor_ref(u: &mut Unstructured<'_>) -> Ref {
    match byte(u) {
        b if b < BOGUS_TENSOR => Ref::Made(b),
        b => Ref::Bogus(b - BOGUS_TENSOR),
    }
}

/// Names the decoder can give a `OneOf` or a mistyped attribute: every spelling of the
/// signature, then ones no op accepts.
fn names_of(sig: &ops::OpSignature) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = sig
        .attrs
        .iter()
        .flat_map(|a| match a.kind {
            AttrKind::OneOf(names) => names.to_vec(),
            _ => Vec::new(),
        })
        .collect();
    names.extend(["", "bogus"]);
    names
}

fn value_of_kind(u: &mut Unstructured<'_>, kind: AttrKind) -> AttrValue {
    match kind {
        AttrKind::Float => AttrValue::Float(float(u)),
        AttrKind::Int => AttrValue::Int(int(u)),
        AttrKind::IntList | AttrKind::Dims | AttrKind::Indices => AttrValue::IntList(ints(u)),
        AttrKind::Bool => AttrValue::Bool(byte(u) & 1 == 1),
        AttrKind::OneOf(names) => {
            let b = usize::from(byte(u));
            AttrValue::Name(names.get(b).map_or_else(|| format!("bogus{b}"), |n| n.to_string()))
        }
    }
}

fn any_value(u: &mut Unstructured<'_>, names: &[&'static str]) -> AttrValue {
    match byte(u) % 5 {
        0 => AttrValue::Float(float(u)),
        1 => AttrValue::Int(int(u)),
        2 => AttrValue::IntList(ints(u)),
        3 => AttrValue::Bool(byte(u) & 1 == 1),
        _ => AttrValue::Name(names[usize::from(byte(u)) % names.len()].to_string()),
    }
}

impl Program {
    /// Decodes a program (never fails: every byte string is some program).
    pub fn decode(data: &[u8]) -> Program {
        let mut u = Unstructured::new(data);
        let names: Vec<&'static str> = ops::all_names().collect();
        let mut steps = Vec::new();
        while !u.is_empty() && steps.len() < MAX_STEPS {
            let step = match byte(&mut u) % STEP_KINDS {
                0 => Step::Context { intermediate: dtype(&mut u), compute: dtype(&mut u) },
                1 => Step::Input { dtype: dtype(&mut u), dims: ints(&mut u) },
                2 => {
                    let name = names[usize::from(byte(&mut u)) % names.len()];
                    decode_op(&mut u, name)
                }
                3 => Step::Strides { tensor: tensor_ref(&mut u), strides: ints(&mut u) },
                4 => {
                    let tensor = tensor_ref(&mut u);
                    let n = byte(&mut u) % MAX_LIST;
                    Step::DimOrder { tensor, order: (0..n).map(|_| usize::from(byte(&mut u))).collect() }
                }
                5 => Step::Uid { tensor: tensor_ref(&mut u), uid: int(&mut u) },
                _ => Step::Output { tensor: tensor_ref(&mut u), dtype: dtype(&mut u) },
            };
            steps.push(step);
        }
        Program { steps }
    }

    /// Runs the program on a builder and builds: every call may fail (the program goes on);
    /// none may panic.
    pub fn build(&self) -> Result<Graph, cudnn_runtime::GraphError> {
        let mut g = GraphBuilder::new("fuzz");
        // `Ref::Made` is taken modulo the builder's tensor count, read back after every call:
        // a call that fails may still have made tensors (an op's scalars, an identity node).
        let count = |g: &GraphBuilder, from: usize| (from..).find(|&i| g.dims(TensorId(i)).is_none()).unwrap_or(from);
        let mut made = 0usize;
        let resolve = |r: Ref, made: usize| match r {
            Ref::Made(i) => TensorId(usize::from(i) % made.max(1)),
            Ref::Bogus(i) => TensorId(usize::MAX - usize::from(i)),
        };
        let (mut inputs, mut outputs) = (0usize, 0usize);
        for step in &self.steps {
            match step {
                Step::Context { intermediate, compute } => {
                    g.context(Context { intermediate_data_type: *intermediate, compute_data_type: *compute });
                }
                Step::Input { dtype, dims } => {
                    inputs += 1;
                    let _ = g.input(&format!("in{inputs}"), *dtype, dims);
                }
                Step::Op { name, inputs: args, attrs } => {
                    let operands: Vec<Operand> = args
                        .iter()
                        .map(|a| match a {
                            Arg::Tensor(r) => Operand::Tensor(resolve(*r, made)),
                            Arg::Scalar(v) => Operand::Scalar(*v),
                        })
                        .collect();
                    let _ = g.op(name, &operands, attrs);
                }
                Step::Strides { tensor, strides } => {
                    let _ = g.set_strides(resolve(*tensor, made), strides);
                }
                Step::DimOrder { tensor, order } => {
                    let _ = g.set_dim_order(resolve(*tensor, made), order);
                }
                Step::Uid { tensor, uid } => {
                    let _ = g.set_uid(resolve(*tensor, made), *uid);
                }
                Step::Output { tensor, dtype } => {
                    outputs += 1;
                    let _ = g.output(resolve(*tensor, made), &format!("out{outputs}"), *dtype);
                }
            }
            made = count(&g, made);
        }
        g.build()
    }
}

fn decode_op(u: &mut Unstructured<'_>, name: &'static str) -> Step {
    let Some(sig) = ops::lookup(name) else {
        return Step::Op { name, inputs: Vec::new(), attrs: Vec::new() };
    };
    let names = names_of(&sig);
    let mut attrs = Vec::new();
    for spec in sig.attrs {
        match byte(u) % 4 {
            0 => {}
            1 | 2 => attrs.push((spec.name.to_string(), value_of_kind(u, spec.kind))),
            _ => attrs.push((spec.name.to_string(), any_value(u, &names))),
        }
    }
    let count = match byte(u) {
        b if b < 0x80 => expected_inputs(name, &attrs).unwrap_or(usize::from(b % MAX_INPUTS)),
        b => usize::from(b % MAX_INPUTS),
    };
    let inputs = (0..count)
        .map(|_| match byte(u) {
            b if b >= SCALAR => Arg::Scalar(float(u)),
            b if b >= BOGUS_TENSOR => Arg::Tensor(Ref::Bogus(b - BOGUS_TENSOR)),
            b => Arg::Tensor(Ref::Made(b)),
        })
        .collect();
    Step::Op { name, inputs, attrs }
}

/// The input count an op called with `attrs` takes (two for `concatenate`, which takes any).
fn expected_inputs(name: &str, attrs: &[(String, AttrValue)]) -> Option<usize> {
    Op::from_call_with_inputs(name, attrs, 2).ok().map(|op| op.inputs().len())
}

// ---------------------------------------------------------------------------------------------
// Encoding

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn byte(&mut self, b: u8) {
        self.0.push(b);
    }
    fn int(&mut self, v: i64) {
        if (-16..=0xdf - 16).contains(&v) {
            self.byte((v + 16) as u8);
        } else if let Some(i) = SPECIAL_INTS.iter().position(|&s| s == v) {
            self.byte(0xe0 + i as u8);
        } else {
            self.byte(0xff);
            self.0.extend_from_slice(&v.to_le_bytes());
        }
    }
    fn float(&mut self, v: f64) {
        let small = v * 16.0 + 112.0;
        if small.fract() == 0.0 && (0.0..=223.0).contains(&small) && v.to_bits() != (-0.0f64).to_bits() {
            self.byte(small as u8);
        } else {
            self.byte(0xff);
            self.0.extend_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    fn dtype(&mut self, d: DataType) {
        let i = DataType::ALL.iter().position(|&x| x == d).unwrap_or(0);
        self.byte(i as u8);
    }
    fn list_len(&mut self, len: usize) -> Result<(), EncodeError> {
        if len >= usize::from(MAX_LIST) {
            return Err(EncodeError::ListTooLong { len, max: usize::from(MAX_LIST) - 1 });
        }
        self.byte(len as u8);
        Ok(())
    }
    fn ints(&mut self, v: &[i64]) -> Result<(), EncodeError> {
        self.list_len(v.len())?;
        v.iter().for_each(|&x| self.int(x));
        Ok(())
    }
    fn tensor(&mut self, id: usize) {
        debug_assert!(id < usize::from(BOGUS_TENSOR), "checked by of_graph");
        self.byte(id as u8);
    }
}

impl Program {
    /// The bytes that [`Program::decode`] reads back as this program (for programs that
    /// [`Program::of_graph`] makes: tensor references `Made`, in-range lists).
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut w = Writer::default();
        let names: Vec<&'static str> = ops::all_names().collect();
        for step in &self.steps {
            match step {
                Step::Context { intermediate, compute } => {
                    w.byte(0);
                    w.dtype(*intermediate);
                    w.dtype(*compute);
                }
                Step::Input { dtype, dims } => {
                    w.byte(1);
                    w.dtype(*dtype);
                    w.ints(dims)?;
                }
                Step::Op { name, inputs, attrs } => {
                    w.byte(2);
                    w.byte(names.iter().position(|n| n == name).unwrap_or(0) as u8);
                    encode_op(&mut w, name, inputs, attrs)?;
                }
                Step::Strides { tensor, strides } => {
                    w.byte(3);
                    encode_ref(&mut w, *tensor);
                    w.ints(strides)?;
                }
                Step::DimOrder { tensor, order } => {
                    w.byte(4);
                    encode_ref(&mut w, *tensor);
                    w.list_len(order.len())?;
                    order.iter().for_each(|&o| w.byte(o as u8));
                }
                Step::Uid { tensor, uid } => {
                    w.byte(5);
                    encode_ref(&mut w, *tensor);
                    w.int(*uid);
                }
                Step::Output { tensor, dtype } => {
                    w.byte(6);
                    encode_ref(&mut w, *tensor);
                    w.dtype(*dtype);
                }
            }
        }
        Ok(w.0)
    }

    /// A program that builds `graph` again (the same fingerprint; names aside): its inputs in
    /// creation order, its nodes, then every tensor's strides and uid, then its outputs.
    pub fn of_graph(graph: &Graph) -> Result<Program, EncodeError> {
        if graph.tensors.len() >= usize::from(BOGUS_TENSOR) {
            return Err(EncodeError::TooManyTensors {
                graph: graph.name.clone(),
                count: graph.tensors.len(),
                max: usize::from(BOGUS_TENSOR) - 1,
            });
        }
        let c = graph.context;
        let mut steps = vec![Step::Context { intermediate: c.intermediate_data_type, compute: c.compute_data_type }];
        // The builder numbers tensors in creation order: inputs where `input` is called, a
        // node's scalars then its outputs where `op` is. A graph's tensors are in that order
        // already, so emitting the inputs that precede each node's tensors keeps the ids.
        let produced: Vec<bool> =
            (0..graph.tensors.len()).map(|i| graph.nodes.iter().any(|n| n.outputs.contains(&TensorId(i)))).collect();
        let is_input = |i: usize| !produced[i] && graph.tensors[i].pass_by_value.is_none();
        let mut next = 0usize;
        for node in &graph.nodes {
            let scalars = node.inputs.iter().filter(|t| graph.tensors[t.0].pass_by_value.is_some());
            let first = node.outputs.iter().chain(scalars).map(|t| t.0).min().unwrap_or(graph.tensors.len());
            while next < first {
                if is_input(next) {
                    let t = &graph.tensors[next];
                    steps.push(Step::Input { dtype: t.data_type, dims: t.dims.clone() });
                }
                next += 1;
            }
            let inputs = node
                .inputs
                .iter()
                .map(|t| match graph.tensors[t.0].pass_by_value {
                    Some(v) => Arg::Scalar(v),
                    None => Arg::Tensor(Ref::Made(t.0 as u8)),
                })
                .collect();
            steps.push(Step::Op { name: node.op.call_name(), inputs, attrs: node.op.call_attrs() });
            next = next.max(node.outputs.iter().map(|t| t.0 + 1).max().unwrap_or(next));
        }
        for (i, t) in graph.tensors.iter().enumerate().skip(next) {
            if is_input(i) {
                steps.push(Step::Input { dtype: t.data_type, dims: t.dims.clone() });
            }
        }
        for (i, t) in graph.tensors.iter().enumerate() {
            if t.pass_by_value.is_none() {
                steps.push(Step::Strides { tensor: Ref::Made(i as u8), strides: t.strides.clone() });
            }
            steps.push(Step::Uid { tensor: Ref::Made(i as u8), uid: t.uid });
        }
        for (i, t) in graph.tensors.iter().enumerate() {
            if produced[i] && !t.is_virtual {
                steps.push(Step::Output { tensor: Ref::Made(i as u8), dtype: t.data_type });
            }
        }
        if steps.len() > MAX_STEPS {
            return Err(EncodeError::TooManySteps { graph: graph.name.clone(), steps: steps.len(), max: MAX_STEPS });
        }
        Ok(Program { steps })
    }
}

fn encode_ref(w: &mut Writer, r: Ref) {
    match r {
        Ref::Made(i) => w.byte(i),
        Ref::Bogus(i) => w.byte(BOGUS_TENSOR + i.min(u8::MAX - BOGUS_TENSOR)),
    }
}

fn encode_op(
    w: &mut Writer,
    name: &'static str,
    inputs: &[Arg],
    attrs: &[(String, AttrValue)],
) -> Result<(), EncodeError> {
    let Some(sig) = ops::lookup(name) else { return Ok(()) };
    let names = names_of(&sig);
    for spec in sig.attrs {
        let Some((_, value)) = attrs.iter().find(|(n, _)| n == spec.name) else {
            w.byte(0);
            continue;
        };
        let err = || EncodeError::Attr { op: name, attr: spec.name.to_string(), value: value.clone() };
        match (spec.kind, value) {
            (AttrKind::Float, AttrValue::Float(v)) => {
                w.byte(1);
                w.float(*v);
            }
            (AttrKind::Int, AttrValue::Int(v)) => {
                w.byte(1);
                w.int(*v);
            }
            (AttrKind::IntList | AttrKind::Dims | AttrKind::Indices, AttrValue::IntList(v)) => {
                w.byte(1);
                w.ints(v)?;
            }
            (AttrKind::Bool, AttrValue::Bool(b)) => {
                w.byte(1);
                w.byte(u8::from(*b));
            }
            (AttrKind::OneOf(choices), AttrValue::Name(n)) => {
                let i = choices.iter().position(|c| c == n).ok_or_else(err)?;
                w.byte(1);
                w.byte(i as u8);
            }
            // A float attribute written as an integer (`scale = 1`), say.
            (_, AttrValue::Float(v)) => {
                w.byte(3);
                w.byte(0);
                w.float(*v);
            }
            (_, AttrValue::Int(v)) => {
                w.byte(3);
                w.byte(1);
                w.int(*v);
            }
            (_, AttrValue::IntList(v)) => {
                w.byte(3);
                w.byte(2);
                w.ints(v)?;
            }
            (_, AttrValue::Bool(b)) => {
                w.byte(3);
                w.byte(3);
                w.byte(u8::from(*b));
            }
            (_, AttrValue::Name(n)) => {
                let i = names.iter().position(|c| c == n).ok_or_else(err)?;
                w.byte(3);
                w.byte(4);
                w.byte(i as u8);
            }
        }
    }
    if expected_inputs(name, attrs) == Some(inputs.len()) {
        w.byte(0);
    } else {
        let n = inputs.len();
        if n >= usize::from(MAX_INPUTS) {
            return Err(EncodeError::ListTooLong { len: n, max: usize::from(MAX_INPUTS) - 1 });
        }
        // The byte ≥ 0x80 that is `n` modulo MAX_INPUTS.
        let base = 0x80 % usize::from(MAX_INPUTS);
        w.byte((0x80 + (n + usize::from(MAX_INPUTS) - base) % usize::from(MAX_INPUTS)) as u8);
    }
    for arg in inputs {
        match arg {
            Arg::Tensor(Ref::Made(i)) => w.tensor(usize::from(*i)),
            Arg::Tensor(Ref::Bogus(i)) => w.byte(BOGUS_TENSOR + (*i).min(SCALAR - BOGUS_TENSOR - 1)),
            Arg::Scalar(v) => {
                w.byte(SCALAR);
                w.float(*v);
            }
        }
    }
    Ok(())
}
