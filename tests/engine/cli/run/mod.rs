//! The run command end to end: tiny fixtures, text in and out, refusals, a closed stderr.

mod closed_stderr;
mod refusals;
mod report;
mod text;
mod tiny;
