//! The UBJSON codec of cudnn-frontend plan payloads: arbitrary bytes through
//! `serialize::ubjson::ubjson_to_json`. Bytes may be rejected (with a typed error) but never
//! panic; bytes that read must write back (`json_to_ubjson`) to UBJSON that reads as the same
//! JSON text and writes the same bytes again (nlohmann's canonical form is a fixed point).
//! Seeds: `fuzz/corpus/ubjson` (cudnn-frontend's payloads and hand-made optimized containers).

#![no_main]

use cudnn_runtime::serialize::ubjson::{json_to_ubjson, ubjson_to_json};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = ubjson_to_json(data) else { return };
    let bytes = json_to_ubjson(&text).expect("the text of a UBJSON value converts back");
    let again = ubjson_to_json(&bytes).expect("written UBJSON reads");
    assert_eq!(again, text, "UBJSON written back reads as other JSON");
    assert_eq!(json_to_ubjson(&again).expect("converts"), bytes, "the canonical form is not a fixed point");
});
