//! The tuning store's reader: arbitrary bytes through `engines::TuningStore::from_bytes`. Bytes may
//! be rejected (with a typed `TuningStoreError`) but never panic; a store that reads writes back
//! to bytes that read as the same store and are a fixed point, merges with itself without a
//! conflict or a change, finds every entry by its key, and names an engine config for every part.
//! Seeds: `fuzz/corpus/tuning_store`.

#![no_main]

use cudnn_runtime::engines::TuningStore;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(store) = TuningStore::from_bytes(data) else { return };
    let bytes = store.to_bytes();
    let back = TuningStore::from_bytes(&bytes).expect("a store written reads back");
    assert_eq!(back, store, "read back as another store");
    assert_eq!(back.to_bytes(), bytes, "not a fixed point");
    let mut merged = store.clone();
    let report = merged.merge(&store);
    assert!(report.conflicts.is_empty() && report.added == 0 && report.replaced == 0, "{report:?}");
    assert_eq!(merged, store);
    for entry in store.entries() {
        let key = entry.key().expect("a checked entry has a key");
        assert_eq!(store.lookup(&key), Ok(Some(entry)));
        assert!(entry.chosen().is_some_and(|parts| parts.len() == entry.parts.len()));
    }
});
