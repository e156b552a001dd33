//! The plan payload reader: arbitrary bytes through `parse_payload`, then, for a payload with a
//! structure, `load_payload` against the deviceless H200 context with real cuDNN (which loads the
//! embedded execution-plan JSON), a write of the loaded plan that must parse again, and the disk
//! plan cache: the bytes written as the entry of their own key in a scratch directory, read by
//! `PlanCache::get` and `PlanCache::seed_from_dir`. Each step may refuse the bytes (a typed
//! error or a cache warning); none may panic or crash. Needs cuDNN on `LD_LIBRARY_PATH`
//! (`fuzz/README.md`). Seeds: `fuzz/corpus/payload`, payloads of deviceless builds.

#![no_main]

use cudnn_runtime::backend::BuildOptions;
use cudnn_runtime::engines::{PlanCache, PlanKey};
use cudnn_runtime::payload::plan::{load_payload, parse_payload, write_payload, Expect, SerializeOptions};

/// One scratch cache directory per process, emptied before each input.
fn scratch() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| std::env::temp_dir().join(format!("cudnn-graph-fuzz-cache-{}", std::process::id())))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(payload) = parse_payload(data) else { return };
    let Some(graph) = payload.structure.clone() else { return };
    cudnn_graph_fuzz::check_graph(&graph);
    let cudnn = cudnn_graph_fuzz::deviceless();
    let expect = Expect::default();
    if let Ok(plan) = load_payload(&cudnn, &payload, None, &expect) {
        if let Ok(bytes) = write_payload(&plan, &payload.origin(), SerializeOptions::default(), &expect) {
            if let Err(e) = parse_payload(&bytes) {
                panic!("the payload written for a loaded plan does not parse: {e}");
            }
        }
    }
    let Some(key) = PlanKey::of_record(&payload.plan) else { return };
    let dir = scratch();
    let _ = std::fs::remove_dir_all(dir);
    let cache = match PlanCache::with_dir(dir) {
        Ok(c) => c,
        Err(e) => panic!("cannot make the scratch cache {}: {e}", dir.display()),
    };
    if let Err(e) = std::fs::write(dir.join(key.file_name()), data) {
        panic!("cannot write the cache entry in {}: {e}", dir.display());
    }
    let _ = cache.get(&cudnn, &graph, &expect, &BuildOptions::default());
    let seeded = PlanCache::in_memory();
    if seeded.seed_from_dir(dir).is_ok() {
        let _ = seeded.get(&cudnn, &graph, &expect, &BuildOptions::default());
    }
});
