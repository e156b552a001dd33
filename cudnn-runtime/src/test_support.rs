//! What the unit tests share: the deviceless cuDNN context of the H200's properties, and graphs.

use crate::backend::Cudnn;
use crate::cudnn::CudnnError;
use crate::{DataType, Graph, GraphBuilder};

/// The H200's device properties, the integration tests' fixture.
const DEVPROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/h200-devprop.json");

/// The deviceless context, or `None` where the libraries are missing and that is allowed
/// (`CUDNN_GRAPH_REQUIRE_CUDNN` is not `1`), as the integration tests' helper.
pub(crate) fn deviceless() -> Option<Cudnn> {
    let json = std::fs::read_to_string(DEVPROP).unwrap();
    match Cudnn::deviceless(&json) {
        Ok(cudnn) => Some(cudnn),
        Err(e @ CudnnError::LibraryMissing { .. }) => {
            assert_ne!(std::env::var("CUDNN_GRAPH_REQUIRE_CUDNN").as_deref(), Ok("1"), "{e}");
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// `gelu(x·w + bias)`, bf16 `[1, 64, 128] · [1, 128, 96]`, the builder's f32 intermediates,
/// named `name`.
pub(crate) fn bf16_bias_gelu(name: &str) -> Graph {
    let mut g = GraphBuilder::new(name);
    let x = g.input("x", DataType::BF16, &[1, 64, 128]).unwrap();
    let w = g.input("w", DataType::BF16, &[1, 128, 96]).unwrap();
    let bias = g.input("bias", DataType::BF16, &[1, 1, 96]).unwrap();
    let h = g.matmul(x, w).unwrap();
    let h = g.op("add", &[h.into(), bias.into()], &[]).unwrap()[0];
    let y = g.op("gelu", &[h.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::BF16).unwrap();
    g.build().unwrap()
}
