//! The `eve` binary: everything is in the library (`eve_cli::main`).

fn main() -> std::process::ExitCode {
    eve_cli::main()
}
