//! Placeholder: written by the conformance work.
fn main() {}
