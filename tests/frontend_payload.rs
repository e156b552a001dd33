//! cudnn-frontend 1.32's plan payloads through [`cudnn_graph::serialize::frontend_payload`].

#![cfg(feature = "cudnn")]

mod common;

use cudnn_graph::serialize::frontend_payload::{parse_frontend_payload, read_frontend_payload};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/frontend");

#[test]
fn scratch() {
    let Some(cudnn) = common::deviceless() else { return };
    let mut names: Vec<_> = std::fs::read_dir(FIXTURES).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "ubjson")).collect();
    names.sort();
    for p in names {
        let bytes = std::fs::read(&p).unwrap();
        let parsed = parse_frontend_payload(&bytes).map(|_| ());
        let r = read_frontend_payload(&cudnn, &bytes, None).map(|p| p.selected().tag());
        println!("{}: {:?} {:?}", p.file_stem().unwrap().to_str().unwrap(), parsed.err().map(|e| e.to_string()), r.map_err(|e| e.to_string()));
    }
}
