//! `cargo xtask <task>`: developer tasks (gates, fuzz-smoke, synth, bench, table generation).

mod unicode_tables;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("unicode-tables") => unicode_tables::run(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask unicode-tables --ucd DIR [--out PATH]");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("xtask: {e}");
        std::process::exit(1);
    }
}
