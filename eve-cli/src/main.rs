//! The `eve` binary: everything is in the library (`eve_cli::main`).

fn main() -> std::process::ExitCode {
    // The isolated sandbox re-runs this binary in a helper mode; that must be decided before any
    // thread exists (a multithreaded process cannot enter a new user namespace).
    eve_sandbox::isolate::helper_main();
    eve_cli::main()
}
