//! `eve-sandbox-helper`: the small binary the isolated sandbox re-executes for its stages,
//! installed next to `eve` by `cargo install`.
//!
//! It exists for speed: each isolated call runs the helper twice (stage 1 enters the namespaces,
//! stage 2 becomes the sandbox's PID 1), and starting this program costs a fraction of starting
//! `eve` itself, whose loader maps and relocates tens of megabytes. The runtime uses it only when
//! it answers with this build's protocol (`eve_sandbox::isolate::default_helper`), and falls back
//! to `eve` otherwise. Run without a stage argument, it does nothing.

fn main() {
    eve_sandbox::isolate::helper_main();
    eprintln!("eve-sandbox-helper: run by eve's sandbox only; it does nothing on its own");
    std::process::exit(2);
}
