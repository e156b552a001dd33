//! The op reference pages hold the single definition's vocabulary: every op name and every
//! attribute of `cudnn_runtime::ops` appears in `docs/dsl.md` and `docs/ops.md`, and every
//! cudnn-frontend tag in `docs/serialization.md`, so adding an op, an attribute or a tag without
//! documenting it fails here.

use cudnn_graph::ops::{all_names, frontend_tags, lookup};

fn doc(name: &str) -> String {
    let path = format!("{}/docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Whether `word` stands in `text` as a whole identifier (not inside a longer one).
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// `(page, what is missing)` for every name or attribute a page does not mention.
fn missing(pages: &[&str], words: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for page in pages {
        let text = doc(page);
        for (word, what) in words {
            if !has_word(&text, word) {
                out.push(format!("docs/{page} does not mention {what} `{word}`"));
            }
        }
    }
    out
}

#[test]
fn every_op_name_is_documented() {
    let names: Vec<(String, String)> = all_names().map(|n| (n.to_string(), "op".to_string())).collect();
    assert!(names.len() > 60, "only {} op names", names.len());
    let gaps = missing(&["dsl.md", "ops.md"], &names);
    assert!(gaps.is_empty(), "{}", gaps.join("\n"));
}

#[test]
fn every_attribute_is_documented() {
    let mut attrs: Vec<(String, String)> = Vec::new();
    for name in all_names() {
        let sig = lookup(name).expect("a listed name looks up");
        for attr in sig.attrs {
            let what = format!("attribute of `{name}`");
            if !attrs.iter().any(|(a, _)| a == attr.name) {
                attrs.push((attr.name.to_string(), what));
            }
        }
    }
    assert!(attrs.len() > 20, "only {} attributes", attrs.len());
    let gaps = missing(&["dsl.md", "ops.md"], &attrs);
    assert!(gaps.is_empty(), "{}", gaps.join("\n"));
}

#[test]
fn every_frontend_tag_is_documented() {
    let tags: Vec<(String, String)> =
        frontend_tags().map(|t| (t.to_string(), "cudnn-frontend tag".to_string())).collect();
    assert!(tags.len() > 15, "only {} tags", tags.len());
    let gaps = missing(&["serialization.md"], &tags);
    assert!(gaps.is_empty(), "{}", gaps.join("\n"));
}

#[test]
fn the_word_matcher_needs_whole_identifiers() {
    assert!(has_word("`relu` and `relu_bwd`", "relu"));
    assert!(!has_word("relu_bwd only", "relu"));
    assert!(!has_word("prelu", "relu"));
    assert!(has_word("relu", "relu"));
}
