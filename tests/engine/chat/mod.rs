//! The conversation layer (TOKENIZER.md §10, §13): the template against the oracle fixtures, the reply parser, `k3 chat` (`cli`).

mod cli;
mod reply;
mod template;
