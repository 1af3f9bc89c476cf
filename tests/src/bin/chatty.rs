//! Fixture: prints a line on stdout and one on stderr.
fn main() {
    println!("chatty says hello on stdout");
    eprintln!("chatty says hello on stderr");
}
