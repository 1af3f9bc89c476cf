//! Fixture: 1000 distinct functions named `many_step` (monomorphizations of one generic
//! function), each called once, then a wait of `SECONDS` (default 0): `--invocations
//! many_step` needs 1000 probes, enough to make defining them take a while.
use std::hint::black_box;

#[inline(never)]
fn many_step<const A: u8, const B: u8, const C: u8>(x: u64) -> u64 {
    black_box(x)
        .wrapping_mul(31)
        .wrapping_add(A as u64 * 100 + B as u64 * 10 + C as u64)
}

macro_rules! ones {
    ($s:ident, $a:literal, $b:literal) => {
        $s = many_step::<$a, $b, 0>($s);
        $s = many_step::<$a, $b, 1>($s);
        $s = many_step::<$a, $b, 2>($s);
        $s = many_step::<$a, $b, 3>($s);
        $s = many_step::<$a, $b, 4>($s);
        $s = many_step::<$a, $b, 5>($s);
        $s = many_step::<$a, $b, 6>($s);
        $s = many_step::<$a, $b, 7>($s);
        $s = many_step::<$a, $b, 8>($s);
        $s = many_step::<$a, $b, 9>($s);
    };
}

macro_rules! tens {
    ($s:ident, $a:literal) => {
        ones!($s, $a, 0);
        ones!($s, $a, 1);
        ones!($s, $a, 2);
        ones!($s, $a, 3);
        ones!($s, $a, 4);
        ones!($s, $a, 5);
        ones!($s, $a, 6);
        ones!($s, $a, 7);
        ones!($s, $a, 8);
        ones!($s, $a, 9);
    };
}

fn main() {
    let mut s = 1u64;
    tens!(s, 0);
    tens!(s, 1);
    tens!(s, 2);
    tens!(s, 3);
    tens!(s, 4);
    tens!(s, 5);
    tens!(s, 6);
    tens!(s, 7);
    tens!(s, 8);
    tens!(s, 9);
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    std::thread::sleep(std::time::Duration::from_secs(seconds));
    std::process::exit(i32::from(black_box(s) == 0));
}
