//! Compile-time checks of `graph!`.
//!
//! - `tests/ui/fail`: every misuse fails with the blessed message in its `.stderr` **under
//!   `cargo check`** (trybuild checks, not builds, a run of compile-fail cases only), so each is an
//!   error in an editor and in `cargo check`, not only at `cargo build`.
//! - `tests/ui/fail-build`: what only an instantiation decides (a const parameter meeting a literal
//!   extent, `Mm::<16, 32, 8>` against a `64`): a const assertion of the graph type, which stable
//!   Rust evaluates when the instantiation is built (E0080 on the op that needs it). Two
//!   requirements that contradict each other whatever the instantiation are caught by the macro
//!   itself and belong in `tests/ui/fail`.
//! - `tests/ui/pass`: every file compiles and runs.
//!
//! Re-bless with `TRYBUILD=overwrite` and review the diff.

#[test]
fn ui() {
    // Compile-fail cases alone: trybuild runs `cargo check` on them.
    {
        let t = trybuild::TestCases::new();
        t.compile_fail("tests/ui/fail/*/*.rs");
    }
    // With pass cases in the run, trybuild builds: the instantiation-time assertions fire.
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail-build/*.rs");
}
