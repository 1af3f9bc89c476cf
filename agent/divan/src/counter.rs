//! Counts of work per iteration (`Bencher::counter`, `Bencher::input_counter`): under
//! `cargo bench` a throughput is printed beside the times; under sbs-profile they are not
//! reported (its own metrics are counted, not declared).

/// An unsigned number a count can be made of (divan's `CountUInt`).
pub trait CountUInt: Copy + std::any::Any {
    /// The number as `u64` (saturating).
    fn into_u64(self) -> u64;
}

/// A value a count can be read from: the unsigned integers and references to them
/// (divan's `AsCountUInt`, what `count_inputs_as` needs of an input).
pub trait AsCountUInt {
    /// The number as `u64` (saturating).
    fn as_u64(&self) -> u64;
}

impl<T: AsCountUInt + ?Sized> AsCountUInt for &T {
    fn as_u64(&self) -> u64 {
        T::as_u64(self)
    }
}

macro_rules! count_uint {
    ($($t:ty),*) => {$(
        impl CountUInt for $t {
            fn into_u64(self) -> u64 {
                u64::try_from(self).unwrap_or(u64::MAX)
            }
        }

        impl AsCountUInt for $t {
            fn as_u64(&self) -> u64 {
                (*self).into_u64()
            }
        }

        /// A bare integer counts items, as in divan (`bencher.counter(n)`).
        impl IntoCounter for $t {
            type Counter = ItemsCount;

            fn into_counter(self) -> ItemsCount {
                ItemsCount::new(self)
            }
        }
    )*};
}

count_uint!(u8, u16, u32, u64, usize);

/// What the counts count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Bytes,
    Chars,
    Cycles,
    Items,
}

/// A counter of one of the four kinds, as the bencher keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnyCounter {
    pub(crate) unit: Unit,
    pub(crate) count: u64,
}

mod sealed {
    /// Only this crate's counters are counters.
    pub trait Sealed {
        fn any(&self) -> super::AnyCounter;
    }
}

/// One of the counters: [`BytesCount`], [`CharsCount`], [`CyclesCount`] or [`ItemsCount`]
/// (sealed, as in divan).
pub trait Counter: Sized + std::any::Any + sealed::Sealed {}

/// What `Bencher::counter` and `input_counter` accept: a counter, or an unsigned integer
/// (a count of items).
pub trait IntoCounter {
    /// The counter it becomes.
    type Counter: Counter;
    /// The counter.
    fn into_counter(self) -> Self::Counter;
}

impl<C: Counter> IntoCounter for C {
    type Counter = C;

    fn into_counter(self) -> C {
        self
    }
}

/// The counter `counter` makes, in the bencher's form.
pub(crate) fn any_counter<C: IntoCounter>(counter: C) -> AnyCounter {
    sealed::Sealed::any(&counter.into_counter())
}

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident => $unit:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name {
            count: u64,
        }

        impl $name {
            /// `count` of them.
            pub fn new<N: CountUInt>(count: N) -> Self {
                $name {
                    count: count.into_u64(),
                }
            }
        }

        impl<N: AsCountUInt> From<N> for $name {
            fn from(count: N) -> Self {
                $name {
                    count: count.as_u64(),
                }
            }
        }

        impl sealed::Sealed for $name {
            fn any(&self) -> AnyCounter {
                AnyCounter {
                    unit: Unit::$unit,
                    count: self.count,
                }
            }
        }

        impl Counter for $name {}
    )*};
}

counters! {
    /// Bytes processed per iteration.
    BytesCount => Bytes;
    /// Characters processed per iteration.
    CharsCount => Chars;
    /// Cycles (of whatever the benchmark calls a cycle) per iteration.
    CyclesCount => Cycles;
    /// Items processed per iteration.
    ItemsCount => Items;
}

/// `BytesCount::u8(n)` ... `BytesCount::f64(n)`: the size of `n` values of the type.
macro_rules! type_bytes {
    ($($t:ident),*) => {
        impl BytesCount {$(
            #[doc = concat!("The size of `n` values of `", stringify!($t), "`.")]
            pub const fn $t(n: usize) -> Self {
                Self::of_many::<$t>(n)
            }
        )*}
    };
}

type_bytes!(f32, f64, i8, u8, i16, u16, i32, u32, i64, u64, i128, u128, isize, usize);

impl BytesCount {
    /// The size of `n` values of type `T` (saturating).
    pub const fn of_many<T>(n: usize) -> Self {
        let count = (std::mem::size_of::<T>() as u64).saturating_mul(n as u64);
        BytesCount { count }
    }

    /// The size of one `T`.
    pub const fn of<T>() -> Self {
        Self::of_many::<T>(1)
    }

    /// The size of the value `val` points to.
    pub fn of_val<T: ?Sized>(val: &T) -> Self {
        BytesCount::new(std::mem::size_of_val(val))
    }

    /// The size of the items of `iter`, counted.
    pub fn of_iter<T, I: IntoIterator<Item = T>>(iter: I) -> Self {
        Self::of_many::<T>(iter.into_iter().count())
    }

    /// The length of a string in bytes.
    pub fn of_str<S: AsRef<str> + ?Sized>(s: &S) -> Self {
        BytesCount::of_val(s.as_ref())
    }

    /// The size of a slice's elements.
    pub fn of_slice<T, S: AsRef<[T]> + ?Sized>(s: &S) -> Self {
        BytesCount::of_val(s.as_ref())
    }
}

impl CharsCount {
    /// The characters of a string.
    pub fn of_str<S: AsRef<str> + ?Sized>(s: &S) -> Self {
        CharsCount::new(s.as_ref().chars().count())
    }
}

impl ItemsCount {
    /// The items of `iter`, counted.
    pub fn of_iter<T, I: IntoIterator<Item = T>>(iter: I) -> Self {
        ItemsCount::new(iter.into_iter().count())
    }
}

/// How `cargo bench` prints a byte throughput: powers of 1000 (`MB/s`, the default) or of
/// 1024 (`MiB/s`), as `Divan::bytes_format` or `--bytes-format` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum BytesFormat {
    /// Powers of 1000.
    #[default]
    Decimal,
    /// Powers of 1024.
    Binary,
}

impl AnyCounter {
    /// The throughput at `secs` per iteration: `12.5 MB/s`, `3.2 Mitem/s` (bytes in
    /// powers of 1024 with `format` binary: `11.9 MiB/s`).
    pub(crate) fn throughput(&self, secs: f64, format: BytesFormat) -> String {
        let per_sec = if secs > 0.0 {
            self.count as f64 / secs
        } else {
            0.0
        };
        let unit = match self.unit {
            Unit::Bytes => "B/s",
            Unit::Chars => "char/s",
            Unit::Cycles => "Hz",
            Unit::Items => "item/s",
        };
        let steps: [(f64, &str); 4] = if self.unit == Unit::Bytes && format == BytesFormat::Binary {
            [
                (1_099_511_627_776.0, "Ti"),
                (1_073_741_824.0, "Gi"),
                (1_048_576.0, "Mi"),
                (1024.0, "Ki"),
            ]
        } else {
            [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")]
        };
        let (scaled, prefix) = steps
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
        assert_eq!(any_counter(BytesCount::of_str("héllo")).count, 6);
        assert_eq!(any_counter(CharsCount::of_str("héllo")).count, 5);
        assert_eq!(any_counter(BytesCount::of_slice(&[1u32, 2])).count, 8);
        assert_eq!(any_counter(BytesCount::of_many::<u64>(3)).count, 24);
        assert_eq!(BytesCount::u16(3), BytesCount::of_iter([1u16, 2, 3]));
        let c = any_counter(ItemsCount::new(2_000u32));
        assert_eq!(c.throughput(1e-3, BytesFormat::Decimal), "2.000 Mitem/s");
        assert_eq!(
            any_counter(BytesCount::new(10u8)).throughput(1.0, BytesFormat::Decimal),
            "10.00 B/s"
        );
        assert_eq!(
            any_counter(BytesCount::new(2048u32)).throughput(1.0, BytesFormat::Binary),
            "2.000 KiB/s"
        );
    }

    #[test]
    fn integers_count_items_as_in_divan() {
        let c = any_counter(7usize);
        assert_eq!((c.unit, c.count), (Unit::Items, 7));
        assert_eq!(any_counter(3u8).unit, Unit::Items);
        assert_eq!(BytesCount::from(&5u32), BytesCount::new(5u64));
        assert_eq!(any_counter(CyclesCount::new(9u16)).unit, Unit::Cycles);
    }
}
