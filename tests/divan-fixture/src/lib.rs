//! Nothing: the package is its bench file, `benches/fixture.rs`.
