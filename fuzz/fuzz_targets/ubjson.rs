//! The UBJSON codec of cudnn-frontend plan payloads: arbitrary bytes through
//! `serialize::ubjson`. Bytes may be rejected (with a typed error) but never panic; bytes that
//! read are written back in nlohmann's canonical form (`canonical_ubjson`), which reads as the
//! same JSON text and is a fixed point. Seeds: `fuzz/corpus/ubjson` (cudnn-frontend's payloads
//! and hand-made forms that nlohmann reads but does not write).

#![no_main]

use cudnn_runtime::serialize::ubjson::{canonical_ubjson, ubjson_to_json};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(canonical) = canonical_ubjson(data) else { return };
    let text = ubjson_to_json(data).expect("bytes that read convert to text");
    assert_eq!(ubjson_to_json(&canonical).expect("written UBJSON reads"), text, "written back as another value");
    assert_eq!(canonical_ubjson(&canonical).expect("written UBJSON reads"), canonical, "not a fixed point");
});
