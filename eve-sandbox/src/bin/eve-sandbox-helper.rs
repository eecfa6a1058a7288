//! The sandbox helper on its own: what the tests and `bench/sandbox.sh` use as the helper
//! executable. Any binary whose `main` starts with `eve_sandbox::isolate::helper_main()` can be
//! the helper; run without a stage argument, this one does nothing.

fn main() {
    eve_sandbox::isolate::helper_main();
    eprintln!("eve-sandbox-helper: run by eve's sandbox only; it does nothing on its own");
    std::process::exit(2);
}
