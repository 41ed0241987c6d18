//! The tokenizer (TOKENIZER.md): loading, parity with the reference, the reference properties
//! and the pre-tokenizer windows.

mod load;
mod parity;
mod reference;
mod windows;
