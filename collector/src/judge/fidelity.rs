//! Fidelity of a replay (`--replay`): the per-operation allocations of each replayed
//! function against the in-situ allocations its captured calls made in the application
//! (AutoJMH's check that a benchmark measures what the application does). The counting
//! runs replay a known sequence of the captured calls, so the comparison is over the
//! same calls. Pure: numbers in, warnings out.

use sbs_agent_abi::harness::COUNT_WARMUP_OPS;
use sbs_reports::human;
use sbs_reports::model::Report;

/// One replayed function's captured calls, in replay order: (allocations, bytes) each
/// made in situ, `None` where the capture had no allocation agent.
#[derive(Debug, Clone, PartialEq)]
pub struct InSitu {
    /// The function's path: its benchmark's name.
    pub function: String,
    /// Per kept call.
    pub calls: Vec<(Option<u64>, Option<u64>)>,
}

impl InSitu {
    /// Mean in-situ (allocations, bytes) over the calls a counting run of `ops`
    /// operations replays, `None` when a call has no in-situ count.
    pub fn expected(&self, ops: u64) -> Option<(f64, f64)> {
        let k = self.calls.len() as u64;
        if k == 0 || ops == 0 {
            return None;
        }
        let (mut count, mut bytes) = (0u64, 0u64);
        for j in 0..ops {
            let (c, b) = self.calls[((COUNT_WARMUP_OPS + j) % k) as usize];
            count += c?;
            bytes += b?;
        }
        Some((count as f64 / ops as f64, bytes as f64 / ops as f64))
    }
}

/// Warn on each replayed benchmark whose `alloc.count/op` or `alloc.bytes/op` differs
/// from what the same calls made in situ, with the likely cause.
pub fn check(report: &mut Report, in_situ: &[InSitu], ops: u64) {
    for bench in &mut report.benchmarks {
        let Some(expected) = in_situ
            .iter()
            .find(|s| s.function == bench.name)
            .and_then(|s| s.expected(ops))
        else {
            continue;
        };
        let mean = |id: &str| {
            bench
                .metrics
                .iter()
                .find(|m| m.id == id)
                .map(|m| m.summary.mean)
        };
        let mut warnings = Vec::new();
        for (id, replayed, in_situ, show) in [
            (
                "alloc.count/op",
                mean("alloc.count/op"),
                expected.0,
                human::count as fn(f64) -> String,
            ),
            (
                "alloc.bytes/op",
                mean("alloc.bytes/op"),
                expected.1,
                human::bytes,
            ),
        ] {
            let Some(replayed) = replayed else { continue };
            // Exact counts on both sides: any difference is a difference.
            if (replayed - in_situ).abs() < 0.5 / ops as f64 {
                continue;
            }
            let cause = if replayed > in_situ {
                "likely a `&mut` or by-value argument cloned for the replay without the spare \
                 capacity the application's had (a cloned `Vec` grows where the original did \
                 not), or a cache the application had warmed and the replay starts cold"
            } else {
                "likely state the application's calls found and the replay lacks (a global or \
                 a cache the function reads or fills), or allocations of another thread during \
                 the application's call (in-situ counts are the whole process's)"
            };
            warnings.push(format!(
                "{id}: the replay makes {} per call, the application made {} per call in situ \
                 over the same captured calls; {cause}",
                show(replayed),
                show(in_situ)
            ));
        }
        bench.warnings.extend(warnings);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_is_over_the_replayed_calls() {
        let s = InSitu {
            function: "f".into(),
            calls: vec![
                (Some(1), Some(10)),
                (Some(3), Some(30)),
                (Some(5), Some(50)),
            ],
        };
        // Warm-up takes call 0; 3 ops replay 1, 2, 0.
        assert_eq!(s.expected(3), Some((3.0, 30.0)));
        // 2 ops: calls 1, 2.
        assert_eq!(s.expected(2), Some((4.0, 40.0)));
        let none = InSitu {
            function: "f".into(),
            calls: vec![(None, None)],
        };
        assert_eq!(none.expected(3), None);
    }
}
