//! The reader fuzz targets' property on stable, bounded: every seed of `fuzz/corpus/structure`
//! and `fuzz/corpus/payload` and 20 000 seeded mutations of them (bit flips, byte insertions and
//! deletions, truncations, splices of two files) go through both readers, which may reject them
//! but never panic. The coverage-guided versions are `fuzz/fuzz_targets/{structure,payload}.rs`
//! (`cargo +nightly fuzz run`, see `fuzz/README.md`).

use std::panic::{catch_unwind, AssertUnwindSafe};

use cudnn_runtime::rng::SplitMix64;

const CORPORA: [&str; 2] = [
    concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/structure"),
    concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/payload"),
];

fn read_both(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = cudnn_runtime::serialize::structure_from_json(text);
    }
    #[cfg(feature = "cudnn")]
    let _ = cudnn_runtime::payload::plan::parse_payload(data);
}

fn mutate(rng: &mut SplitMix64, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(5) {
            0 if !data.is_empty() => {
                let i = at.min(data.len() - 1);
                data[i] ^= 1 << rng.below(8);
            }
            1 => data.insert(at, b"{}[]\",:0-e.9x\\"[rng.below(14)]),
            2 if at < data.len() => {
                data.remove(at);
            }
            3 => data.truncate(at),
            _ => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len());
                data.truncate(at);
                data.extend_from_slice(&other[from..]);
            }
        }
    }
    data
}

#[test]
fn corpus_and_mutations_never_panic() {
    let mut seeds: Vec<(String, Vec<u8>)> = CORPORA
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}")))
        .map(|e| e.unwrap().path())
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 40, "corpus too small: {} files", seeds.len());
    for (name, data) in &seeds {
        assert!(catch_unwind(AssertUnwindSafe(|| read_both(data))).is_ok(), "panic on corpus file {name}");
    }
    let seeds: Vec<Vec<u8>> = seeds.into_iter().map(|(_, d)| d).collect();
    let mut rng = SplitMix64::new(0x00c0_ffee);
    for i in 0..20_000 {
        let data = mutate(&mut rng, &seeds);
        if catch_unwind(AssertUnwindSafe(|| read_both(&data))).is_err() {
            let path = std::env::temp_dir().join(format!("cudnn-graph-crash-{i}.json"));
            std::fs::write(&path, &data).unwrap();
            panic!("mutation {i} panicked; input saved to {}", path.display());
        }
    }
}

/// The tuning store's reader, as `fuzz/fuzz_targets/tuning_store.rs` checks it: every seed of
/// `fuzz/corpus/tuning_store` and 20 000 seeded mutations of them either refuse with a typed
/// error or read as a store that writes back to itself and merges with itself unchanged.
#[cfg(feature = "cudnn")]
#[test]
fn tuning_store_corpus_and_mutations_never_panic() {
    use cudnn_runtime::engines::TuningStore;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/tuning_store");
    let mut seeds: Vec<Vec<u8>> =
        std::fs::read_dir(dir).unwrap().map(|e| std::fs::read(e.unwrap().path()).unwrap()).collect();
    seeds.sort();
    assert!(seeds.len() >= 3);
    let check = |data: &[u8]| -> bool {
        let Ok(store) = TuningStore::from_bytes(data) else { return false };
        let back = TuningStore::from_bytes(&store.to_bytes()).expect("a store written reads back");
        assert_eq!(back, store);
        let mut merged = store.clone();
        assert!(merged.merge(&store).conflicts.is_empty());
        assert_eq!(merged, store);
        for e in store.entries() {
            assert_eq!(store.lookup(&e.key().unwrap()), Ok(Some(e)));
        }
        true
    };
    for seed in &seeds {
        assert!(check(seed), "a seed does not read: {}", String::from_utf8_lossy(seed));
    }
    let (mut rng, mut read) = (SplitMix64::new(34), 0);
    for i in 0..20_000 {
        let data = mutate(&mut rng, &seeds);
        match catch_unwind(AssertUnwindSafe(|| check(&data))) {
            Ok(ok) => read += usize::from(ok),
            Err(_) => {
                let path = std::env::temp_dir().join(format!("cudnn-graph-store-crash-{i}.json"));
                std::fs::write(&path, &data).unwrap();
                panic!("mutation {i} panicked; input saved to {}", path.display());
            }
        }
    }
    println!("{read} of 20000 mutations read as stores");
    assert!(read > 0, "no mutation reads: the mutations test the refusals only");
}
