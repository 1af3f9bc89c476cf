//! Fixture: exits with the code given as its first argument (default 0).
fn main() {
    let code = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    std::process::exit(code);
}
