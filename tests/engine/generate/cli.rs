//! The run options of issue 12 end to end.
