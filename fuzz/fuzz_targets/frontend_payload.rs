//! cudnn-frontend's plan payload import: arbitrary bytes through `parse_frontend_payload`, which
//! reads the UBJSON, checks every key and reads the structure (a graph that reads passes the
//! `structure` target's checks). It may refuse the bytes with a typed error; it may not panic.
//! The step after it, `load_frontend_payload`, hands `cudnn_backend_data` to cuDNN once its
//! operation graph matches the graph's lowering, and cudnn-frontend's payload has no digest: a
//! fuzzed payload would hand cuDNN mutated kernels, which no check can make safe (see the
//! `payload` target), so loading is driven by deliberate edits in `tests/suite/frontend_payload.rs`
//! instead. Seeds: `fuzz/corpus/frontend_payload`, cudnn-frontend 1.32's own payloads
//! (`tests/fixtures/frontend/*.ubjson`).

#![no_main]

use cudnn_runtime::payload::frontend::parse_frontend_payload;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(payload) = parse_frontend_payload(data) else { return };
    if let Some(graph) = &payload.structure {
        cudnn_graph_fuzz::check_graph(graph);
    }
});
