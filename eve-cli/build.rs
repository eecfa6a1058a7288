//! Rebuild the binary when a template changes: templates are embedded with `include_dir!`.
fn main() {
    println!("cargo:rerun-if-changed=../templates");
}
