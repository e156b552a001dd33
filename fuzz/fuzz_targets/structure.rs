//! The structural JSON reader: arbitrary bytes through `structure_from_json`. A document may be
//! rejected (with a typed error) but never panic; one that reads must validate, round-trip
//! exactly (same graph, fingerprint and bytes) and, when small, run on the CPU reference
//! (`cudnn_graph_fuzz::check_graph`). Seeds: `fuzz/corpus/structure`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(graph) = cudnn_runtime::serialize::structure_from_json(text) {
        cudnn_graph_fuzz::check_graph(&graph);
    }
});
