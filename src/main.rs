//! The `k3` command. All logic lives in the library; this only maps errors to exit codes.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let code = k3::cli::main(args);
    std::process::exit(code);
}
