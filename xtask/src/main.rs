//! `cargo xtask <task>`: developer tasks (gates, fuzz-smoke, synth, bench, table generation).

mod fuzz_smoke;
mod synth;
mod unicode_tables;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("fuzz-smoke") => fuzz_smoke::run(&args[1..]),
        Some("synth") => synth::main(&args[1..]),
        Some("unicode-tables") => unicode_tables::run(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask fuzz-smoke [--seconds N] [--target NAME]...");
            eprintln!("       cargo xtask synth <dir> [options] (see --help)");
            eprintln!("       cargo xtask unicode-tables --ucd DIR [--out PATH | --check]");
            2
        }
    };
    std::process::exit(code);
}
