//! Convolutions, pooling and layout ops through `graph!` on the CPU reference engine, against
//! loops written here over NHWC buffers (ports declared `channels_last`), and the same graph
//! made with the builder API; graphs chained through a port agree on its layout.

use crate::common;

use common::{max_abs_error, random};
use cudnn_graph::{graph, GraphBuilder};
use half::f16;

graph! {
    pub Conv3x3<dyn N, dyn C, dyn K, dyn H, dyn W, dyn P, dyn Q>(
        x: f32[N, C, H, W] channels_last,
        w: f32[K, C, 3, 3] channels_last,
    ) -> (y: f32[N, K, P, Q] channels_last) {
        y = conv_fprop(x, w, pre_padding = [1, 0], post_padding = [0, 2], stride = [2, 1], dilation = [1, 2]);
    }

    /// `[B, S, H·D]` → `[B, S, H, D]` → `[B, H, S, D]`, then scaled.
    pub Heads<dyn B, dyn S>(x: f32[B, S, 32]) -> (y: f32[B, 4, S, 8]) {
        y = mul(transpose(reshape(x, shape = [2, 5, 4, 8]), permutation = [0, 2, 1, 3]), 0.5);
    }

    /// Three tensors joined along the sequence, rank 3 (packed), dims checked at compile time.
    pub Join<dyn B, const S0: usize, const S1: usize, const S2: usize, const S: usize>(
        a: f32[B, S0, 8], b: f32[B, S1, 8], c: f32[B, S2, 8],
    ) -> (y: f32[B, S, 8]) {
        y = concatenate(a, b, c, axis = -2);
    }

    /// A graph output read by a later op: the convolution's output is both `yc` and the first
    /// part of the concatenation (cudnn-frontend's "Convolution fprop concatenate" sample).
    pub ConvJoin<dyn N, dyn H, dyn W>(
        x: f32[N, 3, H, W] channels_last,
        w: f32[4, 3, 1, 1] channels_last,
        y0: f32[N, 2, H, W] channels_last,
    ) -> (yc: f32[N, 4, H, W] channels_last, y: f32[N, 6, H, W] channels_last)
    {
        yc = conv_fprop(x, w);
        y = concatenate(yc, y0, axis = 1);
    }

    pub Pool<dyn N, dyn C, dyn H, dyn W, dyn P, dyn Q>(x: f32[N, C, H, W] channels_last) -> (y: f32[N, C, P, Q] channels_last) {
        y = resample(x, mode = avgpool_include_padding, window = [2, 3], stride = [1, 2], padding = [1, 1]);
    }
}

graph! {
    /// Graph A of issue #14: a convolution, an inference batch norm and a ReLU, `y` declared
    /// channels-last for the convolution that reads it next.
    pub ConvBnRelu(
        x: f16[2, 3, 6, 6] channels_last,
        w: f16[4, 3, 3, 3] channels_last,
        mean: f32[1, 4, 1, 1],
        inv_var: f32[1, 4, 1, 1],
        scale: f32[1, 4, 1, 1],
        bias: f32[1, 4, 1, 1],
    ) -> (y: f16[2, 4, 6, 6] channels_last) {
        y = relu(batchnorm_inference(conv_fprop(x, w, padding = [1, 1]), mean, inv_var, scale, bias));
    }

    /// Graph B: a convolution of A's output, declared as A declares it.
    pub ConvNext(y: f16[2, 4, 6, 6] channels_last, w2: f16[5, 4, 3, 3] channels_last)
        -> (z: f16[2, 5, 6, 6] channels_last)
    {
        z = conv_fprop(y, w2, padding = [1, 1]);
    }

    /// A and B as one graph: `y` stays an output (so it is rounded to f16, as between the two
    /// graphs) and feeds the second convolution.
    pub ConvBnReluConv(
        x: f16[2, 3, 6, 6] channels_last,
        w: f16[4, 3, 3, 3] channels_last,
        mean: f32[1, 4, 1, 1],
        inv_var: f32[1, 4, 1, 1],
        scale: f32[1, 4, 1, 1],
        bias: f32[1, 4, 1, 1],
        w2: f16[5, 4, 3, 3] channels_last,
    ) -> (y: f16[2, 4, 6, 6] channels_last, z: f16[2, 5, 6, 6] channels_last) {
        y = relu(batchnorm_inference(conv_fprop(x, w, padding = [1, 1]), mean, inv_var, scale, bias));
        z = conv_fprop(y, w2, padding = [1, 1]);
    }

    /// A with its ports left at the default (row-major) ...
    pub ConvBnReluDefault(
        x: f16[2, 3, 6, 6],
        w: f16[4, 3, 3, 3],
        mean: f32[1, 4, 1, 1],
        inv_var: f32[1, 4, 1, 1],
        scale: f32[1, 4, 1, 1],
        bias: f32[1, 4, 1, 1],
    ) -> (y: f16[2, 4, 6, 6]) {
        y = relu(batchnorm_inference(conv_fprop(x, w, padding = [1, 1]), mean, inv_var, scale, bias));
    }

    /// ... and B likewise: before issue #14 was fixed, A wrote `y` NCHW (a norm produced it) and B
    /// read it NHWC (a convolution reads it).
    pub ConvNextDefault(y: f16[2, 4, 6, 6], w2: f16[5, 4, 3, 3]) -> (z: f16[2, 5, 6, 6]) {
        z = conv_fprop(y, w2, padding = [1, 1]);
    }

    /// The whole chain with default ports.
    pub ConvBnReluConvDefault(
        x: f16[2, 3, 6, 6],
        w: f16[4, 3, 3, 3],
        mean: f32[1, 4, 1, 1],
        inv_var: f32[1, 4, 1, 1],
        scale: f32[1, 4, 1, 1],
        bias: f32[1, 4, 1, 1],
        w2: f16[5, 4, 3, 3],
    ) -> (y: f16[2, 4, 6, 6], z: f16[2, 5, 6, 6]) {
        y = relu(batchnorm_inference(conv_fprop(x, w, padding = [1, 1]), mean, inv_var, scale, bias));
        z = conv_fprop(y, w2, padding = [1, 1]);
    }
}

/// Inputs of the chain, fixed seeds, none zero: `x`, `w`, `mean`, `inv_var`, `scale`, `bias`,
/// `w2` (an inverse variance in [0.5, 1.5), the other statistics in [-1, 1)).
struct ChainInputs {
    x: Vec<f16>,
    w: Vec<f16>,
    stats: [Vec<f32>; 4],
    w2: Vec<f16>,
}

fn chain_inputs() -> ChainInputs {
    let inv_var = random::<f32>(24, 4).iter().map(|v| 1.0 + 0.5 * v).collect();
    ChainInputs {
        x: random::<f16>(21, 2 * 3 * 6 * 6),
        w: random::<f16>(22, 4 * 3 * 9),
        stats: [random::<f32>(23, 4), inv_var, random::<f32>(25, 4), random::<f32>(26, 4)],
        w2: random::<f16>(27, 5 * 4 * 9),
    }
}

/// Issue #14: A = conv → batchnorm_inference → relu with `y` declared channels-last, chained into
/// B = conv(y, w2) that declares `y` the same way, gives what one graph of the whole chain gives.
#[test]
fn graphs_declaring_a_port_alike_chain_through_it() {
    let i = chain_inputs();
    let [mean, inv_var, scale, bias] = &i.stats;
    let a = ConvBnRelu::new().reference(ConvBnReluInputs { x: &i.x, w: &i.w, mean, inv_var, scale, bias }).unwrap();
    let b = ConvNext::new().reference(ConvNextInputs { y: &a.y, w2: &i.w2 }).unwrap();
    let whole = ConvBnReluConv::new()
        .reference(ConvBnReluConvInputs { x: &i.x, w: &i.w, mean, inv_var, scale, bias, w2: &i.w2 })
        .unwrap();
    assert_eq!(max_abs_error(&a.y, &whole.y), 0.0);
    assert!(whole.z.iter().any(|v| v.to_f64() != 0.0));
    assert_eq!(max_abs_error(&b.z, &whole.z), 0.0, "B read A's y in another layout than A wrote it");
    let y = |g: cudnn_graph::Graph| g.tensor_by_name("y").map(|t| t.strides.clone());
    assert_eq!(y(ConvBnRelu::new().graph().unwrap()), y(ConvNext::new().graph().unwrap()));
}

/// The same chain with every port at the default layout (row-major): producer and consumer
/// still agree. Fails on the old default, under which the norm's `y` was NCHW and the
/// convolution's NHWC (errors of 2 to 3.5 in the issue).
#[test]
fn graphs_with_default_ports_chain_through_them() {
    let i = chain_inputs();
    let [mean, inv_var, scale, bias] = &i.stats;
    let a = ConvBnReluDefault::new()
        .reference(ConvBnReluDefaultInputs { x: &i.x, w: &i.w, mean, inv_var, scale, bias })
        .unwrap();
    let b = ConvNextDefault::new().reference(ConvNextDefaultInputs { y: &a.y, w2: &i.w2 }).unwrap();
    let whole = ConvBnReluConvDefault::new()
        .reference(ConvBnReluConvDefaultInputs { x: &i.x, w: &i.w, mean, inv_var, scale, bias, w2: &i.w2 })
        .unwrap();
    assert_eq!(max_abs_error(&a.y, &whole.y), 0.0);
    assert_eq!(max_abs_error(&b.z, &whole.z), 0.0, "B read A's y in another layout than A wrote it");
    let graph = ConvNextDefault::new().graph().unwrap();
    assert_eq!(graph.tensor_by_name("y").unwrap().type_string(), "f16[2, 4, 6, 6] row-major");
}

/// `x[n, c, h, w]` of an NHWC buffer.
fn nhwc(dims: [usize; 4], n: usize, c: usize, h: usize, w: usize) -> usize {
    ((n * dims[2] + h) * dims[3] + w) * dims[1] + c
}

#[test]
fn conv_fprop_matches_direct_loops_over_nhwc() {
    let (n, c, k, h, w) = (2usize, 3usize, 4usize, 7usize, 6usize);
    // P = 1 + (7 + 1 + 0 - 2 - 1) / 2 = 3, Q = 1 + (6 + 0 + 2 - 4 - 1) / 1 = 4.
    let (p, q) = (3usize, 4usize);
    let g = Conv3x3::new(n, c, k, h, w, p, q);
    let x = random::<f32>(1, n * c * h * w);
    let wt = random::<f32>(2, k * c * 9);
    let got = g.reference(Conv3x3Inputs { x: &x, w: &wt }).unwrap();
    let mut want = vec![0f32; n * k * p * q];
    for ni in 0..n {
        for ki in 0..k {
            for pi in 0..p {
                for qi in 0..q {
                    let mut acc = 0f64;
                    for ci in 0..c {
                        for r in 0..3 {
                            for s in 0..3 {
                                let (hh, ww) = ((pi * 2 + r) as i64 - 1, (qi + s * 2) as i64);
                                if hh < 0 || hh >= h as i64 || ww >= w as i64 {
                                    continue;
                                }
                                let xv = x[nhwc([n, c, h, w], ni, ci, hh as usize, ww as usize)];
                                let wv = wt[nhwc([k, c, 3, 3], ki, ci, r, s)];
                                acc += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    want[nhwc([n, k, p, q], ni, ki, pi, qi)] = acc as f32;
                }
            }
        }
    }
    assert!(max_abs_error(&got.y, &want) < 1e-6, "{}", max_abs_error(&got.y, &want));

    // The builder makes the same graph, up to names.
    let mut b = GraphBuilder::new("Conv3x3");
    let xi = b.input("x", cudnn_graph::DataType::F32, &[n as i64, c as i64, h as i64, w as i64]).unwrap();
    let wi = b.input("w", cudnn_graph::DataType::F32, &[k as i64, c as i64, 3, 3]).unwrap();
    b.set_channels_last(xi).unwrap().set_channels_last(wi).unwrap();
    let attrs = [
        ("pre_padding".to_string(), vec![1i64, 0].into()),
        ("post_padding".to_string(), vec![0i64, 2].into()),
        ("stride".to_string(), vec![2i64, 1].into()),
        ("dilation".to_string(), vec![1i64, 2].into()),
    ];
    let y = b.op("conv_fprop", &[xi.into(), wi.into()], &attrs).unwrap()[0];
    let y = b.output(y, "y", cudnn_graph::DataType::F32).unwrap();
    b.set_channels_last(y).unwrap();
    assert_eq!(b.build().unwrap().fingerprint(), g.graph().unwrap().fingerprint());
}

#[test]
fn average_pooling_matches_direct_loops_over_nhwc() {
    let (n, c, h, w) = (2usize, 3usize, 5usize, 7usize);
    // P = 1 + (5 + 2 - 2) / 1 = 6, Q = 1 + (7 + 2 - 3) / 2 = 4.
    let (p, q) = (6usize, 4usize);
    let g = Pool::new(n, c, h, w, p, q);
    let x = random::<f32>(3, n * c * h * w);
    let got = g.reference(PoolInputs { x: &x }).unwrap();
    let mut want = vec![0f32; n * c * p * q];
    for ni in 0..n {
        for ci in 0..c {
            for pi in 0..p {
                for qi in 0..q {
                    let mut acc = 0f64;
                    for r in 0..2 {
                        for s in 0..3 {
                            let (hh, ww) = ((pi + r) as i64 - 1, (qi * 2 + s) as i64 - 1);
                            if (0..h as i64).contains(&hh) && (0..w as i64).contains(&ww) {
                                acc += f64::from(x[nhwc([n, c, h, w], ni, ci, hh as usize, ww as usize)]);
                            }
                        }
                    }
                    want[nhwc([n, c, p, q], ni, ci, pi, qi)] = (acc / 6.0) as f32;
                }
            }
        }
    }
    assert!(max_abs_error(&got.y, &want) < 1e-6, "{}", max_abs_error(&got.y, &want));
}

#[test]
fn reshape_and_transpose_split_heads() {
    let (b, s_len) = (2usize, 5usize);
    let g = Heads::new(b, s_len);
    let x = random::<f32>(4, b * s_len * 32);
    let got = g.reference(HeadsInputs { x: &x }).unwrap();
    // The transpose is a view (strides permuted); `mul` writes y packed, in the new order.
    let graph = g.graph().unwrap();
    let view = graph.nodes[1].outputs[0];
    assert_eq!(graph.tensor(view).strides, vec![160, 8, 32, 1]);
    assert_eq!(graph.tensor_by_name("y").unwrap().strides, vec![160, 40, 8, 1]);
    let mut want = vec![0f32; x.len()];
    for bi in 0..b {
        for h in 0..4 {
            for si in 0..s_len {
                for d in 0..8 {
                    want[((bi * 4 + h) * s_len + si) * 8 + d] = x[(bi * s_len + si) * 32 + h * 8 + d] * 0.5;
                }
            }
        }
    }
    assert!(max_abs_error(&got.y, &want) < 1e-7);
}

#[test]
fn concatenate_joins_along_the_axis() {
    let b = 3usize;
    let g = Join::<2, 5, 1, 8>::new(b);
    let (x0, x1, x2) = (random::<f32>(1, b * 2 * 8), random::<f32>(2, b * 5 * 8), random::<f32>(3, b * 8));
    let got = g.reference(JoinInputs { a: &x0, b: &x1, c: &x2 }).unwrap();
    let mut want = Vec::with_capacity(b * 8 * 8);
    for i in 0..b {
        want.extend_from_slice(&x0[i * 16..(i + 1) * 16]);
        want.extend_from_slice(&x1[i * 40..(i + 1) * 40]);
        want.extend_from_slice(&x2[i * 8..(i + 1) * 8]);
    }
    assert_eq!(got.y, want, "a concatenation moves values exactly");
    // The builder API makes the same graph.
    let mut gb = GraphBuilder::new("Join");
    let a = gb.input("a", cudnn_graph::DataType::F32, &[3, 2, 8]).unwrap();
    let bb = gb.input("b", cudnn_graph::DataType::F32, &[3, 5, 8]).unwrap();
    let c = gb.input("c", cudnn_graph::DataType::F32, &[3, 1, 8]).unwrap();
    let y = gb.op("concatenate", &[a.into(), bb.into(), c.into()], &[("axis".into(), (-2i64).into())]).unwrap()[0];
    gb.output(y, "y", cudnn_graph::DataType::F32).unwrap();
    let built = gb.build().unwrap();
    assert_eq!(built.fingerprint(), g.graph().unwrap().fingerprint());
}

#[test]
fn an_assigned_output_feeds_a_later_op() {
    let (n, h, w) = (2usize, 3usize, 5usize);
    let g = ConvJoin::new(n, h, w);
    let (x, wt, y0) = (random::<f32>(1, n * 3 * h * w), random::<f32>(2, 4 * 3), random::<f32>(3, n * 2 * h * w));
    let got = g.reference(ConvJoinInputs { x: &x, w: &wt, y0: &y0 }).unwrap();
    let mut want_yc = Vec::with_capacity(n * h * w * 4);
    for pixel in x.chunks(3) {
        for k in 0..4 {
            want_yc.push((0..3).map(|c| f64::from(pixel[c]) * f64::from(wt[k * 3 + c])).sum::<f64>() as f32);
        }
    }
    assert!(max_abs_error(&got.yc, &want_yc) < 1e-6, "{}", max_abs_error(&got.yc, &want_yc));
    // Channels-last: each pixel of y is the conv's 4 channels (yc itself), then y0's 2.
    let want_y: Vec<f32> = got.yc.chunks(4).zip(y0.chunks(2)).flat_map(|(c, z)| c.iter().chain(z).copied()).collect();
    assert_eq!(got.y, want_y);
    // One tensor, non-virtual, produced by the conv and consumed by the concatenation.
    let graph = g.graph().unwrap();
    let yc = graph.tensor_by_name("yc").unwrap();
    assert!(!yc.is_virtual);
    assert_eq!(graph.nodes[1].inputs[0], graph.nodes[0].outputs[0]);
}
