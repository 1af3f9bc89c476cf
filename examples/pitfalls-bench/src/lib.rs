//! The code under test of the pitfalls suite (`benches/pitfalls.rs`): a sum and a
//! pseudo-random vector. The suite's benchmarks misuse them on purpose, one pitfall each.

/// `n` pseudo-random values (a fixed linear congruential sequence: the same in every run).
pub fn generate(n: usize) -> Vec<u64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x >> 11
        })
        .collect()
}

/// The wrapping sum of `values`. Inlined into its callers, as a generic iterator sum would
/// be: where its result is unused, the optimizer can then delete the whole loop.
#[inline]
pub fn sum(values: &[u64]) -> u64 {
    values.iter().fold(0u64, |a, &v| a.wrapping_add(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_values_are_fixed_and_differ() {
        let v = generate(1000);
        assert_eq!(v, generate(1000));
        assert!(v.windows(2).any(|w| w[0] > w[1]), "not sorted");
        assert_eq!(sum(&[1, 2, u64::MAX]), 2);
    }
}
