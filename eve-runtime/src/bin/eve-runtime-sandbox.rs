//! The sandbox helper for the runtime's own tests (`RuntimeConfig::sandbox_helper`): the `eve`
//! binary plays this part in production. Run without a stage argument, it does nothing.

fn main() {
    eve_sandbox::isolate::helper_main();
    eprintln!("eve-runtime-sandbox: run by eve's sandbox only; it does nothing on its own");
    std::process::exit(2);
}
