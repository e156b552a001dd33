//! The `graph!` procedural macro of cudnn-graph: a shim over `cudnn-macros-core`, which holds the
//! parser, checker and code generator as a testable library. See the `cudnn-graph` crate for the
//! DSL reference.

#![warn(missing_docs)]

use proc_macro::TokenStream;

/// Declares fused compute graphs as Rust types, checked at compile time.
///
/// See the `cudnn-graph` crate documentation and `docs/dsl.md` for the syntax.
#[proc_macro]
pub fn graph(input: TokenStream) -> TokenStream {
    cudnn_macros_core::expand_graphs(input.into()).into()
}
