//! One plan, one device: what the CPU can check of multi-GPU use (issue: several GPUs in one
//! process). Two deviceless contexts for different GPUs (an H200, sm 9.0, from its real properties;
//! an A100-like sm 8.0 description written for this test): each plans for its own SM, and a plan
//! compiled for one is refused by the other with a typed error instead of loading.

#![cfg(feature = "cudnn")]

use crate::common;

use cudnn_graph::backend::{BuildOptions, Cudnn};
use cudnn_graph::graph;
use cudnn_graph::payload::plan::{PayloadError, SerializeOptions};
use cudnn_graph::Error;

graph! {
    pub Mm<dyn M>(a: f16[1, M, 64], b: f16[1, 64, 32]) -> (c: f16[1, M, 32]) {
        c = matmul(a, b);
    }
}

const A100: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/a100-devprop.json");

#[needs_cudnn]
#[test]
fn plans_belong_to_the_device_they_were_compiled_for() {
    let Some(h200) = common::deviceless() else { return };
    let a100 = Cudnn::deviceless(&std::fs::read_to_string(A100).unwrap()).unwrap();
    assert_eq!((h200.sm(), a100.sm()), (Some(90), Some(80)));
    let g = Mm::new(128);
    let for_h200 = g.build(&h200, &BuildOptions::default()).unwrap();
    let for_a100 = g.build(&a100, &BuildOptions::default()).unwrap();
    let (bytes_h200, bytes_a100) = (
        for_h200.serialize(SerializeOptions { structure: false }).unwrap(),
        for_a100.serialize(SerializeOptions { structure: false }).unwrap(),
    );
    println!("h200: {}; a100: {}", for_h200.plan().selected(), for_a100.plan().selected());
    // Each loads where it was made...
    assert!(Mm::deserialize(&h200, &bytes_h200).is_ok());
    assert!(Mm::deserialize(&a100, &bytes_a100).is_ok());
    // ...and nowhere else.
    for (cudnn, bytes, payload_sm, runtime_sm) in [(&a100, &bytes_h200, 90, 80), (&h200, &bytes_a100, 80, 90)] {
        match Mm::deserialize(cudnn, bytes) {
            Err(Error::Payload(PayloadError::Sm { payload, runtime })) => {
                assert_eq!((payload, runtime), (payload_sm, runtime_sm))
            }
            Err(e) => panic!("expected an SM mismatch, got {e}"),
            Ok(_) => panic!("a plan for sm {payload_sm} loaded into an sm {runtime_sm} context"),
        }
    }
}
