//! Result model and renderers.
#![forbid(unsafe_code)]
pub mod model;
