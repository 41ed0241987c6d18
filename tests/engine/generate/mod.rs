//! The generation layer (ENGINE.md §8): the sampler against independent implementations, the stop rules.

mod sample;
mod stop;
