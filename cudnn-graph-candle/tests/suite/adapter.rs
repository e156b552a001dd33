//! `Runner` on CPU tensors: results equal the graph type's own reference run, narrowed tensors
//! are read in place, a declared layout takes the matching strided view and gives outputs in it,
//! and every mismatch is a candle error naming the graph and the port.

use candle_core::{DType, Device, Tensor};
use cudnn_graph::graph;
use cudnn_graph_candle::Runner;

graph! {
    /// y = relu(x · w + b)
    pub Dense<dyn T, dyn IN, dyn OUT>(x: f32[1, T, IN], w: f32[1, IN, OUT], b: f32[1, 1, OUT]) -> (y: f32[1, T, OUT]) {
        y = relu(add(matmul(x, w), b));
    }

    /// The same with w in `[out, in]` storage, and the output transposed in storage too.
    pub DenseT<dyn T, dyn IN, dyn OUT>(x: f32[1, T, IN], w: f32[1, IN, OUT] order [0, 2, 1])
        -> (y: f32[1, T, OUT] order [0, 2, 1])
    {
        y = matmul(x, w);
    }
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed * 40503) % 2003) as f32 / 1001.5 - 1.0)
        .collect()
}

fn tensor(dims: &[usize], seed: u32) -> Tensor {
    Tensor::from_vec(values(dims.iter().product(), seed), dims, &Device::Cpu).unwrap()
}

fn message(result: candle_core::Result<Vec<Tensor>>) -> String {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn equals_the_graph_types_reference_run() {
    let (t, i, o) = (5, 6, 4);
    let (x, w, b) = (tensor(&[1, t, i], 1), tensor(&[1, i, o], 2), tensor(&[1, 1, o], 3));
    let runner = Runner::new();
    let got = runner.run(&Dense::new(t, i, o), &[&x, &w, &b]).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].dims(), [1, t, o]);
    let (xv, wv, bv) = (values(t * i, 1), values(i * o, 2), values(o, 3));
    let want = Dense::new(t, i, o).reference(DenseInputs { x: &xv, w: &wv, b: &bv }).unwrap().y;
    assert_eq!(got[0].flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
    assert!(want.iter().any(|&v| v > 0.0) && want.contains(&0.0), "relu both ways: {want:?}");
    // A second binding of the same type is its own graph.
    let x2 = tensor(&[1, 2, i], 4);
    assert_eq!(runner.run(&Dense::new(2, i, o), &[&x2, &w, &b]).unwrap()[0].dims(), [1, 2, o]);
}

#[test]
fn narrowed_tensors_are_read_in_place() {
    let (t, i, o) = (3, 4, 2);
    let big = tensor(&[1, t + 2, i], 9);
    let x = big.narrow(1, 2, t).unwrap();
    assert!(x.is_contiguous() && x.layout().start_offset() > 0);
    let (w, b) = (tensor(&[1, i, o], 2), tensor(&[1, 1, o], 3));
    let runner = Runner::new();
    let got = runner.run(&Dense::new(t, i, o), &[&x, &w, &b]).unwrap();
    let copy = x.copy().unwrap();
    let want = runner.run(&Dense::new(t, i, o), &[&copy, &w, &b]).unwrap();
    assert_eq!(got[0].to_vec3::<f32>().unwrap(), want[0].to_vec3::<f32>().unwrap());
}

#[test]
fn a_declared_layout_takes_the_strided_view_and_gives_its_output_in_it() {
    let (t, i, o) = (3, 5, 4);
    let x = tensor(&[1, t, i], 1);
    let w_out_in = tensor(&[o, i], 2); // candle's Linear layout
    let w = w_out_in.t().unwrap().unsqueeze(0).unwrap();
    let runner = Runner::new();
    let y = runner.run(&DenseT::new(t, i, o), &[&x, &w]).unwrap().remove(0);
    assert_eq!(y.dims(), [1, t, o]);
    assert!(!y.is_contiguous(), "the output is `[1, OUT, T]` storage seen as `[1, T, OUT]`");
    let want = x.matmul(&w.contiguous().unwrap()).unwrap();
    let diff = (y - want).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    assert!(diff < 1e-5, "{diff}");
}

#[test]
fn mismatches_name_the_graph_and_the_port() {
    let (t, i, o) = (3, 4, 2);
    let (x, w, b) = (tensor(&[1, t, i], 1), tensor(&[1, i, o], 2), tensor(&[1, 1, o], 3));
    let runner = Runner::new();
    let g = Dense::new(t, i, o);

    let e = message(runner.run(&g, &[&x, &w]));
    assert!(e.contains("graph `Dense` takes 3 inputs (x, w, b), got 2 tensors"), "{e}");

    let wrong = tensor(&[1, t, i + 1], 1);
    let e = message(runner.run(&g, &[&wrong, &w, &b]));
    assert!(e.contains("graph `Dense`, input `x`: the port is [1, 3, 4], the tensor is [1, 3, 5]"), "{e}");

    let half = b.to_dtype(DType::BF16).unwrap();
    let e = message(runner.run(&g, &[&x, &w, &half]));
    assert!(e.contains("input `b`: the port is f32, the tensor is bf16"), "{e}");

    // A transposed view where the port is row-major: refused, never copied silently.
    let wt = tensor(&[1, o, i], 2).transpose(1, 2).unwrap();
    let e = message(runner.run(&g, &[&x, &wt, &b]));
    assert!(e.contains("input `w`: the port's strides are [8, 2, 1], the tensor's [8, 1, 4]"), "{e}");
    assert!(e.contains("contiguous()"), "{e}");
}

#[test]
fn the_runner_is_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Runner>();
    let runner = Runner::new();
    let (w, b) = (tensor(&[1, 4, 2], 2), tensor(&[1, 1, 2], 3));
    std::thread::scope(|s| {
        for t in 1..4 {
            let (runner, w, b) = (&runner, &w, &b);
            s.spawn(move || {
                let x = tensor(&[1, t, 4], 1);
                assert_eq!(runner.run(&Dense::new(t, 4, 2), &[&x, w, b]).unwrap()[0].dims(), [1, t, 2]);
            });
        }
    });
}
