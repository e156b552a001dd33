//! The builder API: the bytes are a program of `GraphBuilder` calls (every op by name with any
//! inputs and attributes, inputs of any dims and types, strides, dim orders, uids, by-value
//! scalars, outputs; `cudnn_graph_fuzz::program`). Any call may fail with a typed error; none may
//! panic, and a graph that builds must pass `cudnn_graph_fuzz::check_graph` (validate,
//! fingerprint, structural JSON round trip, CPU reference when small). Seeds:
//! `fuzz/corpus/builder`, real graphs written as programs.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let program = cudnn_graph_fuzz::program::Program::decode(data);
    if let Ok(graph) = program.build() {
        cudnn_graph_fuzz::check_graph(&graph);
    }
});
