//! What the attribute macros' expansions use; not an API (`divan::__private`).

use std::fmt::{Debug, Display};
use std::time::Duration;

pub use linkme::{self, distributed_slice};

use crate::Bencher;

/// Every `#[divan::bench]` of the program.
#[distributed_slice]
#[linkme(crate = linkme)]
pub static BENCHES: [BenchEntry];

/// Every `#[divan::bench_group]` of the program.
#[distributed_slice]
#[linkme(crate = linkme)]
pub static GROUPS: [GroupEntry];

/// Options of a benchmark or a group, as the attribute gives them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Options {
    pub sample_count: Option<u32>,
    pub sample_size: Option<u32>,
    pub min_time: Option<Duration>,
    pub max_time: Option<Duration>,
    pub ignore: Option<bool>,
}

impl Options {
    /// These options, with `outer`'s where these have none.
    pub(crate) fn over(self, outer: Options) -> Options {
        Options {
            sample_count: self.sample_count.or(outer.sample_count),
            sample_size: self.sample_size.or(outer.sample_size),
            min_time: self.min_time.or(outer.min_time),
            max_time: self.max_time.or(outer.max_time),
            ignore: self.ignore.or(outer.ignore),
        }
    }
}

/// One `#[divan::bench]` function.
pub struct BenchEntry {
    pub module_path: &'static str,
    pub name: &'static str,
    pub line: u32,
    pub options: fn() -> Options,
    pub instances: fn(&mut Instances),
}

/// One `#[divan::bench_group]` module.
pub struct GroupEntry {
    /// The module's full path, crate first.
    pub module_path: &'static str,
    /// `name = "..."`: shown in place of the module's name.
    pub name: Option<&'static str>,
    pub options: fn() -> Options,
}

/// A benchmark's run: called with the `Bencher` of the job at hand.
pub(crate) type Run = Box<dyn Fn(Bencher<'_, '_>)>;

/// The instances of one benchmark function, as its expansion lists them.
#[derive(Default)]
pub struct Instances {
    pub(crate) list: Vec<(Vec<String>, Run)>,
}

impl Instances {
    /// An instance whose path ends with `suffix` (its type, constant and argument names).
    pub fn add<F>(&mut self, suffix: Vec<String>, run: F)
    where
        F: Fn(Bencher<'_, '_>) + 'static,
    {
        self.list.push((suffix, Box::new(run)));
    }
}

/// The values of `args = ...`, kept for the whole process.
pub fn leak_args<I: IntoIterator>(args: I) -> &'static [I::Item]
where
    I::Item: 'static,
{
    Vec::leak(args.into_iter().collect())
}

/// How an argument is passed to the benchmark function: as the reference to the stored
/// value, or a copy of it, or a `&str` of a stored `String`.
pub trait ToArg<T> {
    /// The argument.
    fn get(this: Self) -> T;
}

impl<T> ToArg<T> for T {
    fn get(this: Self) -> T {
        this
    }
}

impl<T: Copy> ToArg<T> for &T {
    fn get(this: Self) -> T {
        *this
    }
}

impl<T: Copy> ToArg<T> for &&T {
    fn get(this: Self) -> T {
        **this
    }
}

impl<'a> ToArg<&'a str> for &'a String {
    fn get(this: Self) -> &'a str {
        this
    }
}

/// An argument value, to be named by `Display` when it has it, else by `Debug`.
pub struct Named<'a, T: ?Sized>(pub &'a T);

/// Naming by `Display` (preferred: the method is found first on `&&Named`).
pub trait NameByDisplay {
    fn arg_name(self) -> String;
}

impl<T: Display + ?Sized> NameByDisplay for &&Named<'_, T> {
    fn arg_name(self) -> String {
        self.0.to_string()
    }
}

/// Naming by `Debug`, for values without `Display`.
pub trait NameByDebug {
    fn arg_name(self) -> String;
}

impl<T: Debug + ?Sized> NameByDebug for &Named<'_, T> {
    fn arg_name(self) -> String {
        format!("{:?}", self.0)
    }
}

/// Constant `i` of `consts = EXPR` (the last one past the end: those instances are not
/// registered).
pub const fn const_at<T: Copy>(values: &[T], i: usize) -> T {
    if i < values.len() {
        values[i]
    } else {
        values[values.len() - 1]
    }
}

/// How many constants `consts = EXPR` has.
pub const fn const_len<T>(values: &[T]) -> usize {
    values.len()
}

/// The name of type `T` as divan shows it: without its module path, up to the first `<`
/// (`alloc::vec::Vec<u8>` is `Vec<u8>`).
pub fn type_name<T: ?Sized>() -> String {
    short_type_name(std::any::type_name::<T>())
}

pub(crate) fn short_type_name(mut name: &str) -> String {
    while let Some((head, tail)) = name.split_once("::") {
        if head.contains('<') {
            break;
        }
        name = tail;
    }
    name.to_string()
}

/// A duration given as `min_time`/`max_time`: a `Duration` or a number of seconds.
pub trait IntoDuration {
    fn into_duration(self) -> Duration;
}

impl IntoDuration for Duration {
    fn into_duration(self) -> Duration {
        self
    }
}

impl IntoDuration for f64 {
    fn into_duration(self) -> Duration {
        Duration::try_from_secs_f64(self).unwrap_or(Duration::ZERO)
    }
}

macro_rules! seconds {
    ($($t:ty),*) => {$(
        impl IntoDuration for $t {
            fn into_duration(self) -> Duration {
                Duration::from_secs(u64::try_from(self).unwrap_or(0))
            }
        }
    )*};
}

seconds!(u64, u32, i32, i64, usize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // The generated code's own forms: the double borrow picks the naming.
    #[allow(clippy::needless_borrow, clippy::needless_borrows_for_generic_args)]
    fn names_and_arguments() {
        assert_eq!(type_name::<Vec<u8>>(), "Vec<u8>");
        assert_eq!(type_name::<String>(), "String");
        assert_eq!(
            short_type_name("a::b::C<d::E>"),
            "C<d::E>",
            "no further than the first generic"
        );
        assert_eq!((&&Named(&5u8)).arg_name(), "5");
        #[derive(Debug)]
        struct Opaque;
        assert_eq!((&&Named(&Opaque)).arg_name(), "Opaque");
        let s = String::from("x");
        let r: &str = ToArg::get(&s);
        assert_eq!(r, "x");
        let n: usize = ToArg::get(&3usize);
        assert_eq!(n, 3);
        assert_eq!(const_at(&[1, 2, 3], 7), 3);
        assert_eq!(2.5f64.into_duration(), Duration::from_millis(2500));
    }
}
