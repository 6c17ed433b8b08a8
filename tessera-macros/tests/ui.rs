//! Compile-fail snapshots of `#[tessera::kernel]` and `tile!` errors (`TRYBUILD=overwrite` to
//! regenerate; read every `.stderr` before committing it).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
