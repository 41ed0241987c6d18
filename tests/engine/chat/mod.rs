//! The conversation layer (TOKENIZER.md §10, §13): the template against the oracle fixtures, the reply parser.

mod reply;
mod template;
