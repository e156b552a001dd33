//! `cargo +nightly fuzz run deserialize fuzz/corpus/deserialize`: arbitrary bytes through both
//! readers (structural JSON and plan payload). Either may return an error; neither may panic.
//! CI replays the corpus, and thousands of seeded mutations of it, on stable
//! (`cudnn-runtime/tests/fuzz_corpus.rs`).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = cudnn_runtime::serialize::structure_from_json(text);
    }
    let _ = cudnn_runtime::serialize::plan::parse_payload(data);
});
