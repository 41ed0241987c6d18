//! The I/O layer (ENGINE.md §4–§5, FORMATS.md §6): reads and faults, and what it reads from
//! the system.

mod faults;
mod sys;
