//! Compile-time checks of `graph!`: every misuse in `tests/ui/fail` must fail with the blessed
//! message in its `.stderr` (re-bless with `TRYBUILD=overwrite` and review the diff); every file
//! in `tests/ui/pass` must compile and run.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
