//! Counts of work per iteration (`Bencher::counter`, `Bencher::input_counter`): under
//! `cargo bench` a throughput is printed beside the times; under sbs-profile they are not
//! reported (its own metrics are counted, not declared).

/// An unsigned number a count can be made of.
pub trait CountUInt: Copy {
    /// The number as `u64` (saturating).
    fn into_u64(self) -> u64;
}

macro_rules! count_uint {
    ($($t:ty),*) => {$(
        impl CountUInt for $t {
            fn into_u64(self) -> u64 {
                u64::try_from(self).unwrap_or(u64::MAX)
            }
        }
    )*};
}

count_uint!(u8, u16, u32, u64, u128, usize);

/// What the counts count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Bytes,
    Chars,
    Items,
}

/// A counter of one of the three kinds, as the bencher keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnyCounter {
    pub(crate) unit: Unit,
    pub(crate) count: u64,
}

/// Bytes processed per iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BytesCount {
    count: u64,
}

impl BytesCount {
    /// `count` bytes.
    pub fn new<N: CountUInt>(count: N) -> Self {
        BytesCount {
            count: count.into_u64(),
        }
    }

    /// The size of `n` values of type `T`.
    pub fn of_many<T>(n: usize) -> Self {
        BytesCount::new(std::mem::size_of::<T>().saturating_mul(n))
    }

    /// The size of one `T`.
    pub fn of<T>() -> Self {
        BytesCount::new(std::mem::size_of::<T>())
    }

    /// The length of a string in bytes.
    pub fn of_str<S: AsRef<str> + ?Sized>(s: &S) -> Self {
        BytesCount::new(s.as_ref().len())
    }

    /// The size of a slice's elements.
    pub fn of_slice<T, S: AsRef<[T]> + ?Sized>(s: &S) -> Self {
        BytesCount::new(std::mem::size_of_val(s.as_ref()))
    }

    /// `count` bytes (divan's shorthand).
    pub fn u8<N: CountUInt>(count: N) -> Self {
        BytesCount::new(count)
    }
}

/// Characters processed per iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CharsCount {
    count: u64,
}

impl CharsCount {
    /// `count` characters.
    pub fn new<N: CountUInt>(count: N) -> Self {
        CharsCount {
            count: count.into_u64(),
        }
    }

    /// The characters of a string.
    pub fn of_str<S: AsRef<str> + ?Sized>(s: &S) -> Self {
        CharsCount::new(s.as_ref().chars().count())
    }
}

/// Items processed per iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemsCount {
    count: u64,
}

impl ItemsCount {
    /// `count` items.
    pub fn new<N: CountUInt>(count: N) -> Self {
        ItemsCount {
            count: count.into_u64(),
        }
    }
}

/// A counter that `Bencher::counter` and `input_counter` accept.
pub trait IntoCounter {
    /// The counter.
    fn into_counter(self) -> AnyCounter;
}

impl IntoCounter for BytesCount {
    fn into_counter(self) -> AnyCounter {
        AnyCounter {
            unit: Unit::Bytes,
            count: self.count,
        }
    }
}

impl IntoCounter for CharsCount {
    fn into_counter(self) -> AnyCounter {
        AnyCounter {
            unit: Unit::Chars,
            count: self.count,
        }
    }
}

impl IntoCounter for ItemsCount {
    fn into_counter(self) -> AnyCounter {
        AnyCounter {
            unit: Unit::Items,
            count: self.count,
        }
    }
}

impl AnyCounter {
    /// The throughput at `secs` per iteration: `12.5 MB/s`, `3.2 Mitem/s`.
    pub(crate) fn throughput(&self, secs: f64) -> String {
        let per_sec = if secs > 0.0 {
            self.count as f64 / secs
        } else {
            0.0
        };
        let unit = match self.unit {
            Unit::Bytes => "B/s",
            Unit::Chars => "char/s",
            Unit::Items => "item/s",
        };
        let (scaled, prefix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")]
            .into_iter()
            .find(|&(f, _)| per_sec >= f)
            .map(|(f, p)| (per_sec / f, p))
            .unwrap_or((per_sec, ""));
        let decimals = if scaled >= 100.0 {
            1
        } else if scaled >= 10.0 {
            2
        } else {
            3
        };
        format!("{scaled:.decimals$} {prefix}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_throughputs() {
        assert_eq!(BytesCount::of_str("héllo").into_counter().count, 6);
        assert_eq!(CharsCount::of_str("héllo").into_counter().count, 5);
        assert_eq!(BytesCount::of_slice(&[1u32, 2]).into_counter().count, 8);
        assert_eq!(BytesCount::of_many::<u64>(3).into_counter().count, 24);
        let c = ItemsCount::new(2_000u32).into_counter();
        assert_eq!(c.throughput(1e-3), "2.000 Mitem/s");
        assert_eq!(
            BytesCount::new(10u8).into_counter().throughput(1.0),
            "10.00 B/s"
        );
    }
}
