//! The device-properties document `cudnn-graph devprop` writes on a GPU (issue 35.2): it carries
//! every key some supported cuDNN reads, whichever cuDNN wrote it, with the memory bus width read
//! off the driver, and it makes a deviceless context for the loaded cuDNN.
//!
//! Without a GPU each test prints why and passes, unless `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the
//! GPU bundle's `run-tests`), which makes that a failure.

#![cfg(feature = "cudnn")]

use crate::common;

use cudnn_graph::backend::cudarc::driver::sys::CUdevice_attribute as Attr;
use cudnn_graph::backend::{devprop, Cudnn};

#[needs_gpu]
#[test]
fn gpu_devprop_serves_every_supported_cudnn() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let json = cudnn.device_properties_json().unwrap();
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    for key in devprop::VERSIONED_KEYS {
        assert!(doc.get(key.name).is_some(), "cuDNN {}: no `{}` in {json}", cudnn.version(), key.name);
    }
    assert_eq!(doc["smCountOrigin"], 0, "{json}");
    // The bus width is the driver's, and the table used for documents without it agrees.
    let bits = stream.context().attribute(Attr::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH).unwrap();
    assert_eq!(doc["memoryBusWidth"].as_i64(), Some(i64::from(bits)), "{json}");
    let name = doc["deviceName"].as_str().unwrap_or_default();
    if let Some((_, table)) = devprop::BUS_WIDTHS.iter().find(|(n, _)| name.contains(n)) {
        assert_eq!(*table, i64::from(bits), "{name}: devprop::BUS_WIDTHS says {table}, the driver {bits}");
    }
    println!(
        "cuDNN {} on {name}: memoryBusWidth {bits}, oversizedSharedMemoryPerBlock {}, maxSharedMemoryPerBlockOptin {}",
        devprop::version_string(cudnn.version()),
        doc["oversizedSharedMemoryPerBlock"],
        doc["maxSharedMemoryPerBlockOptin"]
    );
    // The document plans deviceless on the loaded cuDNN, for the same SM.
    let deviceless = Cudnn::deviceless(&json).unwrap();
    assert_eq!(deviceless.sm(), cudnn.sm());
    assert_eq!(deviceless.device_properties(), Some(json.as_str()));
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
