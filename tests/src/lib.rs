//! Fixture programs and integration tests live in this package; see `src/bin/` and `tests/`.
