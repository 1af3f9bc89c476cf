//! What `#[sbs_harness::capture]` costs a call: the same function marked and plain, each
//! operation 1,000 calls. Not capturing (a normal run) the marked one adds one relaxed
//! load and a branch per call; run with `SBS_CAPTURE=DIR` in the environment, each call
//! also takes the function's lock and draws a random number, and the kept ones serialize
//! their arguments. `benches/capture/run.sh` runs it under sbs-profile.

use sbs_harness::{black_box, Suite};

/// Calls per operation.
const CALLS: usize = 1000;

#[inline(never)]
fn plain(data: &[u8]) -> u64 {
    data.iter()
        .fold(0u64, |h, &b| h.rotate_left(5) ^ u64::from(b))
}

#[sbs_harness::capture]
#[inline(never)]
fn marked(data: &[u8]) -> u64 {
    data.iter()
        .fold(0u64, |h, &b| h.rotate_left(5) ^ u64::from(b))
}

fn main() {
    let mut suite = Suite::new();
    suite.bench("call/plain", |_| vec![7u8; 16]).run(|data| {
        let mut h = 0;
        for _ in 0..CALLS {
            h ^= plain(black_box(data));
        }
        h
    });
    suite.bench("call/marked", |_| vec![7u8; 16]).run(|data| {
        let mut h = 0;
        for _ in 0..CALLS {
            h ^= marked(black_box(data));
        }
        h
    });
    suite.main();
}
