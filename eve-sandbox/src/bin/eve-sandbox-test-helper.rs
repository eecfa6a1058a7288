//! The sandbox helper of this crate's own tests (`CARGO_BIN_EXE_eve-sandbox-test-helper`). The
//! runtime uses `eve-cli`'s `eve-sandbox-helper`, the same program installed next to `eve` (see
//! `isolate::default_helper`); `bench/sandbox.sh`'s example is its own helper. Any binary whose
//! `main` starts with `eve_sandbox::isolate::helper_main()` can be the helper; run without a
//! stage argument, this one does nothing.

fn main() {
    eve_sandbox::isolate::helper_main();
    eprintln!("eve-sandbox-test-helper: run by eve's sandbox only; it does nothing on its own");
    std::process::exit(2);
}
