//! The `graph!` procedural macro of cudnn-graph. This crate is a shim: parsing (`parse`),
//! checking (`check`, which runs the shape rules of `cudnn_runtime::ops`) and code generation
//! (`expand`) are separate stages. See the `cudnn-graph` crate for the DSL reference.
//!
//! The macro is hermetic: no GPU, no libcudnn, no files and no network at expansion.

mod check;
mod ctxt;
mod expand;
mod parse;

use proc_macro::TokenStream;

/// Declares fused compute graphs as Rust types, checked at compile time.
///
/// See the `cudnn-graph` crate documentation and `docs/dsl.md` for the syntax.
#[proc_macro]
pub fn graph(input: TokenStream) -> TokenStream {
    let parsed = match syn::parse::<parse::Input>(input) {
        Ok(p) => p,
        Err(e) => return e.to_compile_error().into(),
    };
    let mut out = proc_macro2::TokenStream::new();
    for def in &parsed.graphs {
        let cx = ctxt::Ctxt::new();
        let checked = check::check(&cx, def);
        match cx.check() {
            Ok(()) => out.extend(expand::expand(def, &checked, true)),
            Err(e) => {
                out.extend(e.to_compile_error());
                out.extend(expand::expand(def, &checked, false));
            }
        }
    }
    out.into()
}
