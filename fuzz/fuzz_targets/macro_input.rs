//! The `graph!` macro's expansion: arbitrary text that lexes as Rust tokens through
//! `cudnn_macros_core::expand_graphs` (the whole macro: parse, check, expand). A declaration may be
//! refused (with spanned `compile_error!`s) but the expansion never panics, and what it emits,
//! accepted or not, parses as Rust items: a refused graph still expands to its fallback items, so
//! its uses do not cascade into unrelated errors. Seeds: `fuzz/corpus/macro_input` (every
//! `graph!` body of the trybuild cases and the examples).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(tokens) = text.parse::<proc_macro2::TokenStream>() else { return };
    let out = cudnn_macros_core::expand_graphs(tokens);
    if let Err(e) = syn::parse2::<syn::File>(out.clone()) {
        panic!("the expansion is not Rust items ({e}):\n{out}");
    }
});
