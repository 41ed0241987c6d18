//! `cargo xtask <task>`: developer tasks (gates, fuzz-smoke, synth, bench, table generation).

mod synth;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("synth") => synth::main(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask <task> (tasks: synth)");
            2
        }
    };
    std::process::exit(code);
}
