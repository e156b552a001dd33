//! Test attributes of the cudnn-graph workspace (a dev-dependency, never published): a test that
//! needs cuDNN or a GPU is *ignored*, with the reason, when the machine that builds it lacks them,
//! so `cargo test`'s summary counts it as ignored instead of as passed.
//!
//! The verdicts are made once per build by `build.rs` (which says how); CI builds with
//! `CUDNN_GRAPH_REQUIRE_CUDNN=1` and the GPU bundle with `CUDNN_GRAPH_REQUIRE_GPU=1`, so there
//! nothing is ignored and a missing library fails loudly.
//!
//! ```ignore
//! #[macro_use]
//! extern crate cudnn_graph_testkit;
//!
//! #[needs_cudnn] // above `#[test]`: it adds `#[ignore = "needs libcudnn ..."]` where cuDNN is missing
//! #[test]
//! fn plans_on_the_h200() { /* ... */ }
//!
//! #[test]
//! fn gpu_tests_were_built_to_run() {
//!     // A GPU machine runs `run-tests` with CUDNN_GRAPH_REQUIRE_GPU=1: fail if they were ignored.
//!     if std::env::var("CUDNN_GRAPH_REQUIRE_GPU").as_deref() == Ok("1") {
//!         assert!(!gpu_tests_ignored!());
//!     }
//! }
//! ```

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

include!(concat!(env!("OUT_DIR"), "/verdicts.rs"));

/// Marks a test that needs libcudnn and libcuda (deviceless planning, the CLI's `aot`): ignored,
/// with the reason, when they could not be opened where it was built (unless that build had
/// `CUDNN_GRAPH_REQUIRE_CUDNN=1`). Put it above `#[test]`.
#[proc_macro_attribute]
pub fn needs_cudnn(args: TokenStream, item: TokenStream) -> TokenStream {
    ignore_unless(args, item, "needs_cudnn", CUDNN_MISSING)
}

/// Marks a test that needs a GPU (and cuDNN): ignored, with the reason, when the machine that
/// built it had none (unless that build had `CUDNN_GRAPH_REQUIRE_GPU=1`). Put it above `#[test]`.
#[proc_macro_attribute]
pub fn needs_gpu(args: TokenStream, item: TokenStream) -> TokenStream {
    ignore_unless(args, item, "needs_gpu", GPU_MISSING)
}

/// `true` when this build ignores the tests marked [`macro@needs_gpu`]: for a guard test that fails
/// when such a build is run where a GPU is required.
#[proc_macro]
pub fn gpu_tests_ignored(input: TokenStream) -> TokenStream {
    verdict(input, "gpu_tests_ignored", GPU_MISSING)
}

/// A test, `gpu_tests_built_to_run`, for every module of GPU tests: it fails when
/// `CUDNN_GRAPH_REQUIRE_GPU=1` at run time (the GPU bundle's `run-tests` sets it) but this build
/// ignores the tests marked [`macro@needs_gpu`], so that a build made where no GPU was found cannot
/// pass on the GPU machine as "N ignored". One per module, so that a filter naming a module
/// (`run-tests gpu_partition`) selects it too.
#[proc_macro]
pub fn gpu_guard(input: TokenStream) -> TokenStream {
    if let Some(error) = no_arguments(input, "gpu_guard") {
        return error;
    }
    let ignored = GPU_MISSING.is_some();
    let guard = r#"
        /// Fails where a GPU is required but this binary ignores its GPU tests.
        #[test]
        fn gpu_tests_built_to_run() {
            let required = ::std::env::var("CUDNN_GRAPH_REQUIRE_GPU").is_ok_and(|v| v == "1");
            assert!(
                !(required && IGNORED),
                "CUDNN_GRAPH_REQUIRE_GPU=1, but this binary was built where no GPU was found, with its \
                 GPU tests ignored: build it with `scripts/gpu-bundle` (CUDNN_GRAPH_REQUIRE_GPU=1 at build time)"
            );
        }
    "#
    .replace("IGNORED", if ignored { "true" } else { "false" });
    match guard.parse() {
        Ok(tokens) => tokens,
        // The text above is fixed Rust; this is unreachable short of a compiler bug.
        Err(e) => compile_error(&format!("gpu_guard: {e}"), Span::call_site()),
    }
}

/// `true` when this build ignores the tests marked [`macro@needs_cudnn`].
#[proc_macro]
pub fn cudnn_tests_ignored(input: TokenStream) -> TokenStream {
    verdict(input, "cudnn_tests_ignored", CUDNN_MISSING)
}

fn ignore_unless(args: TokenStream, item: TokenStream, name: &str, missing: Option<&str>) -> TokenStream {
    if let Some(error) = no_arguments(args, name) {
        return error.into_iter().chain(item).collect();
    }
    let Some(reason) = missing else { return item };
    // `#[ignore = "reason"]`, ahead of the item's own attributes (`#[test]` among them).
    let ignore = TokenStream::from_iter([
        TokenTree::Ident(Ident::new("ignore", Span::call_site())),
        TokenTree::Punct(Punct::new('=', Spacing::Alone)),
        TokenTree::Literal(Literal::string(reason)),
    ]);
    let attribute =
        [TokenTree::Punct(Punct::new('#', Spacing::Alone)), TokenTree::Group(Group::new(Delimiter::Bracket, ignore))];
    attribute.into_iter().chain(item).collect()
}

fn verdict(input: TokenStream, name: &str, missing: Option<&str>) -> TokenStream {
    if let Some(error) = no_arguments(input, name) {
        return error;
    }
    let value = if missing.is_some() { "true" } else { "false" };
    TokenStream::from(TokenTree::Ident(Ident::new(value, Span::call_site())))
}

/// `compile_error!("...")` when the macro was given arguments (it takes none).
fn no_arguments(args: TokenStream, name: &str) -> Option<TokenStream> {
    let span = args.into_iter().next()?.span();
    Some(compile_error(&format!("`{name}` takes no arguments"), span))
}

/// `compile_error!("message");` at `span`.
fn compile_error(message: &str, span: Span) -> TokenStream {
    let message = Literal::string(message);
    let call = [
        TokenTree::Ident(Ident::new("compile_error", span)),
        TokenTree::Punct(Punct::new('!', Spacing::Alone)),
        TokenTree::Group(Group::new(Delimiter::Parenthesis, TokenStream::from(TokenTree::Literal(message)))),
        TokenTree::Punct(Punct::new(';', Spacing::Alone)),
    ];
    call.into_iter()
        .map(|mut t| {
            t.set_span(span);
            t
        })
        .collect()
}
