//! The `#[kernel]` docs list exactly the front end's op table, in its order.

#[test]
fn kernel_docs_list_the_op_table() {
    let src = include_str!("../src/lib.rs");
    let doc: String = src
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("/// # Ops"))
        .skip_while(|l| !l.starts_with("/// matmul,"))
        .take_while(|l| *l != "///")
        // `\<` keeps rustdoc from reading `<T>` as an HTML tag.
        .map(|l| l.trim_start_matches("///").trim().replace("\\<", "<"))
        .collect::<Vec<_>>()
        .join(" ");
    let listed: Vec<&str> = doc.split(", ").collect();
    assert_eq!(listed, tessera_front::lower::kernel::KERNEL_OPS);
}
