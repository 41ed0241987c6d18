//! `cargo xtask <task>`: developer tasks (gates, fuzz-smoke, synth, bench, table generation).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        _ => {
            eprintln!("usage: cargo xtask <task> (no tasks yet)");
            std::process::exit(2);
        }
    }
}
