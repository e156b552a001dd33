//! The parser, checker and code generator behind cudnn-graph's `graph!` macro, as a normal
//! library (the proc-macro crate `cudnn-macros` is a thin shim over [`expand_graphs`], as
//! sqlx-macros is over sqlx-macros-core), so every stage can be unit-tested on token streams
//! parsed from strings.
//!
//! The stages:
//! - [`parse`]: tokens → a syntax tree of the DSL ([`parse::Input`], [`parse::GraphDef`]);
//! - [`check`]: the graph-level rules, running the shape rules of `cudnn_runtime::ops` over
//!   symbolic dims and collecting every error in a [`Ctxt`];
//! - [`expand`]: the generated items (the graph type, its argument structs and methods).
//!
//! The macro is hermetic: no GPU, no libcudnn, no files and no network at expansion.

#![warn(missing_docs)]

pub mod check;
mod ctxt;
pub mod expand;
pub mod parse;

pub use ctxt::Ctxt;

use proc_macro2::TokenStream;

/// Expands the body of one `graph!` invocation: every graph it declares, or the errors of each
/// graph followed by its fallback expansion (so uses of a broken graph's type do not cascade).
pub fn expand_graphs(input: TokenStream) -> TokenStream {
    let parsed = match syn::parse2::<parse::Input>(input) {
        Ok(p) => p,
        Err(e) => return e.to_compile_error(),
    };
    let mut out = TokenStream::new();
    for def in &parsed.graphs {
        let cx = Ctxt::new();
        let checked = check::check(&cx, def);
        match cx.check() {
            Ok(()) => out.extend(expand::expand(def, &checked, true)),
            Err(e) => {
                out.extend(e.to_compile_error());
                out.extend(expand::expand(def, &checked, false));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::expand_graphs;

    fn expand(src: &str) -> String {
        expand_graphs(src.parse().expect("the test's tokens lex")).to_string()
    }

    #[test]
    fn a_valid_graph_expands_to_its_builder_calls() {
        let out = expand("pub G(x: f32[4]) -> (y: f32[4]) { y = relu(x); }");
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.contains("pub struct G"), "{out}");
        assert!(out.contains("op_named (\"y\" , \"relu\""), "{out}");
    }

    #[test]
    fn a_graph_with_errors_expands_to_them_and_to_stubs() {
        let out = expand("pub G(x: f32[4]) -> (y: f32[4]) { y = rleu(x); }");
        assert!(out.contains("compile_error ! { \"unknown op `rleu`; did you mean `relu`?\" }"), "{out}");
        // The type still exists (uses of it type-check) but its bodies never run.
        assert!(out.contains("pub struct G"), "{out}");
        assert!(out.contains("unreachable"), "{out}");
        assert!(!out.contains("op_named"), "{out}");
    }

    #[test]
    fn each_graph_of_an_invocation_is_checked_on_its_own() {
        let out = expand(
            "pub A(x: f32[4]) -> (y: f32[4]) { y = relu(x); }
             pub B(x: f32[4]) -> (y: f32[4]) { y = nope(x); }",
        );
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(out.contains("pub struct A") && out.contains("pub struct B"), "{out}");
    }

    #[test]
    fn every_plan_of_a_graph_is_built_with_its_declared_fusion() {
        let out = expand("#[fuse(single)] pub G(x: f32[4]) -> (y: f32[4]) { y = relu(x); }");
        assert!(!out.contains("compile_error"), "{out}");
        let p = ":: cudnn_graph :: __private ::";
        assert!(out.contains(&format!("pub const FUSION : {p} Fusion = {p} Fusion :: Single ;")), "{out}");
        assert!(out.contains(&format!("{p} declared_fusion (options , Self :: FUSION)")), "{out}");
        // `build`, `build_autotuned` and `build_cached` plan with those options, never the
        // caller's as given; `build_autotuned` through the tuning store its options name.
        assert_eq!(out.matches("let options = Self :: build_options (options) ;").count(), 3, "{out}");
        assert!(
            out.contains(&format!(
                "{p} build_autotuned (cudnn , & graph , & self . expectation () , & options , tuning)"
            )),
            "{out}"
        );
        assert!(out.contains(&format!("{p} ExecutionPlan :: build (cudnn , & graph , & options)")), "{out}");
        assert!(out.contains("cache . get_or_build (cudnn , & graph , & self . expectation () , & options)"), "{out}");
        let auto = expand("pub G(x: f32[4]) -> (y: f32[4]) { y = relu(x); }");
        assert!(auto.contains(&format!("pub const FUSION : {p} Fusion = {p} Fusion :: Auto ;")), "{auto}");
    }

    #[test]
    fn symbolic_extents_are_evaluated_with_checked_arithmetic() {
        let out = expand(
            "pub G<const H: usize, dyn B>(x: f32[B, H * 2]) -> (y: f32[B, H, 2]) { y = reshape(x, shape = [B, H, 2]); }",
        );
        assert!(!out.contains("compile_error"), "{out}");
        let p = ":: cudnn_graph :: __private ::";
        // The port's expression: its parameters checked into i64 once, then checked arithmetic.
        assert!(out.contains(&format!("let __v_H : i64 = {p} dim_value (\"H\" , H) ? ;")), "{out}");
        assert!(out.contains(&format!("{p} extent (\"2 * H\" , & [(\"H\" , __v_H)] ,")), "{out}");
        assert!(out.contains("a . checked_mul (b)"), "{out}");
        // The reshape's extents: the dyn one read from `self`, the literal as written.
        let shape = format!(
            "(:: std :: string :: String :: from (\"shape\") , {p} AttrValue :: IntList (:: std :: vec ! [{p} dim_value (\"B\" , self . B) ? , {p} dim_value (\"H\" , H) ? , 2i64]))"
        );
        assert!(out.contains(&shape), "{out}");
    }

    #[test]
    fn a_parse_error_is_reported_alone() {
        let out = expand("pub G(x: f32[4]) -> (y: f32[4]) { y = relu(x) }");
        assert!(out.starts_with(":: core :: compile_error !"), "{out}");
        assert!(!out.contains("struct"), "{out}");
    }
}
