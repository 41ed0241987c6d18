//! The command line (ENGINE.md §3): `--help`, `k3 inspect`, the run command (`run`), its output
//! files, and the output paths and streams a new user tried.

mod doctor;
mod habits;
mod help;
mod inspect;
mod output;
mod output_names;
mod run;
mod verify;
