//! Matching user patterns such as `Vec::push` against demangled function names.
//!
//! Rules (also shown by `sbs-profile --help`):
//! - A name is split into path segments at `::`; generic arguments (`<...>`) and C++
//!   parameter lists and return types are dropped: `alloc::vec::Vec<T,A>::push`,
//!   `<alloc::vec::Vec<u32>>::push` and `ns::Vec<int>::push(int const&)` all become a path
//!   ending in `Vec::push`.
//! - A pattern matches when its segments equal the last segments of a name, whole
//!   segments only: `Vec::push` and `push` match `alloc::vec::Vec<T,A>::push`, but not
//!   `alloc::string::String::push_str` nor `Vec::push_mut`.
//! - A trait method is reachable through the type and through the trait:
//!   `<app::Widget as core::fmt::Display>::fmt` matches `Widget::fmt`, `Display::fmt`
//!   and `fmt`.
//! - The raw symbol name (mangled, or a plain C name like `malloc`) and the full
//!   demangled name also match exactly.

use crate::error::ProbeError;

/// A parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    /// The library named before the name (`LIBRARY:NAME`), as written: a path or a file
    /// name. Such a pattern matches in that library only, loaded also when the program
    /// does not link it (it may `dlopen` it).
    library: Option<String>,
    /// Every alternative must be a suffix of one of the name's paths (a pattern written
    /// as `<A as B>::f` has two).
    alternatives: Vec<Vec<String>>,
}

impl Pattern {
    /// Parse a pattern.
    pub fn parse(text: &str) -> Result<Pattern, ProbeError> {
        let trimmed = text.trim();
        let bad = |reason: &str| ProbeError::BadPattern {
            pattern: text.to_string(),
            reason: reason.to_string(),
        };
        if trimmed.is_empty() {
            return Err(bad(
                "it is empty; give a function name such as `Vec::push` or `malloc`",
            ));
        }
        let (library, trimmed) = split_library(trimmed);
        if library.is_some() && trimmed.is_empty() {
            return Err(bad(
                "it names a library but no function; write LIBRARY:NAME, e.g. `libz.so.1:inflate`",
            ));
        }
        if !balanced(trimmed) {
            return Err(bad("its brackets `<>`, `()` or `[]` are not balanced"));
        }
        let alternatives: Vec<Vec<String>> = name_paths(trimmed)
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        if alternatives.is_empty() {
            return Err(bad(
                "it names no path segment; give a function name such as `Vec::push`",
            ));
        }
        Ok(Pattern {
            text: text.to_string(),
            library: library.map(str::to_string),
            alternatives,
        })
    }

    /// The library the pattern names (`LIBRARY:NAME`), if it names one.
    pub fn library(&self) -> Option<&str> {
        self.library.as_deref()
    }

    /// The pattern as the user wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The last segment of the first alternative (the function's own name).
    pub fn last_segment(&self) -> &str {
        self.alternatives[0]
            .last()
            .map(String::as_str)
            .unwrap_or("")
    }

    /// Whether a function with this raw symbol name and demangled name matches.
    pub fn matches(&self, raw: &str, demangled: &str) -> bool {
        if raw == self.text || demangled == self.text {
            return true;
        }
        self.matches_paths(&name_paths(demangled))
    }

    /// Whether the precomputed `paths` of a name (from [`name_paths`]) match.
    pub fn matches_paths(&self, paths: &[Vec<String>]) -> bool {
        self.alternatives
            .iter()
            .all(|alt| paths.iter().any(|p| p.ends_with(alt)))
    }
}

fn balanced(s: &str) -> bool {
    let mut stack = Vec::new();
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if bytes[i..].starts_with(b"operator") {
            // The symbol of an operator is not a bracket: operator<<, operator(), ...
            i += "operator".len();
            if bytes[i..].starts_with(b"()") || bytes[i..].starts_with(b"[]") {
                i += 2;
            } else {
                while i < bytes.len() && b"<>=!+-*/%^&|~,".contains(&bytes[i]) {
                    i += 1;
                }
            }
            continue;
        }
        match c {
            b'<' | b'(' | b'[' => stack.push(c),
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            b'>' | b')' | b']' => {
                let open = match c {
                    b'>' => b'<',
                    b')' => b'(',
                    _ => b'[',
                };
                if stack.pop() != Some(open) {
                    return false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    stack.is_empty()
}

/// The paths (lists of segments) by which a demangled name can be reached.
///
/// `<app::Widget as core::fmt::Display>::fmt` gives `[app, Widget, fmt]` and
/// `[core, fmt, Display, fmt]`; `alloc::vec::Vec<T,A>::push` gives
/// `[alloc, vec, Vec, push]`; `void ns::f<int>(int)` gives `[ns, f]`.
pub fn name_paths(name: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = name.chars().collect();
    parse_paths(&chars)
}

fn parse_paths(c: &[char]) -> Vec<Vec<String>> {
    let mut alts: Vec<Vec<String>> = vec![Vec::new()];
    let mut cur = String::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let is_operator = cur == "operator" || cur.ends_with("::operator");
        i = match ch {
            // A qualified path: `<Type>` or `<Type as Trait>`.
            '<' if cur.is_empty() => qualified_prefix(&mut alts, c, i),
            '<' | '(' | '[' if is_operator => operator_symbol(&mut cur, c, i),
            // Generic arguments: dropped.
            '<' => closing(c, i, '<', '>') + 1,
            '(' if cur.is_empty() => {
                // `(anonymous namespace)`: part of the name.
                let end = closing(c, i, '(', ')');
                cur.extend(&c[i..(end + 1).min(c.len())]);
                end + 1
            }
            '(' => break, // C++ parameter list: the rest is not the name.
            ':' if c.get(i + 1) == Some(&':') => {
                push_segment(&mut alts, &mut cur);
                i + 2
            }
            ' ' => {
                space(&mut alts, &mut cur, c, i, is_operator);
                i + 1
            }
            _ => {
                cur.push(ch);
                i + 1
            }
        };
    }
    push_segment(&mut alts, &mut cur);
    alts
}

/// The qualified path `<Type>` or `<Type as Trait>` opening at `c[i]`: each of its
/// prefixes extends every alternative. Returns the index after it.
fn qualified_prefix(alts: &mut Vec<Vec<String>>, c: &[char], i: usize) -> usize {
    let end = closing(c, i, '<', '>');
    let inner = &c[i + 1..end.min(c.len())];
    let prefixes = qualified(inner);
    *alts = alts
        .iter()
        .flat_map(|a| {
            prefixes.iter().map(move |p| {
                let mut v = a.clone();
                v.extend(p.iter().cloned());
                v
            })
        })
        .collect();
    end + 1
}

/// The symbol of `operator<`, `operator<<`, `operator()`, `operator[]`, `operator<=>`...
/// starting at `c[i]`, appended to `cur`. Returns the index after it.
fn operator_symbol(cur: &mut String, c: &[char], mut i: usize) -> usize {
    if c[i] == '(' || c[i] == '[' {
        cur.push(c[i]);
        if let Some(&next) = c.get(i + 1) {
            cur.push(next);
        }
        return i + 2;
    }
    while i < c.len() && matches!(c[i], '<' | '=' | '>') {
        cur.push(c[i]);
        i += 1;
    }
    i
}

/// A space at `c[i]`: part of `operator new`, before a bracket (ignored), or after a C++
/// return type, which precedes the name (everything so far is dropped).
fn space(alts: &mut Vec<Vec<String>>, cur: &mut String, c: &[char], i: usize, is_operator: bool) {
    let next = c[i + 1..].iter().find(|&&n| n != ' ').copied();
    if is_operator || matches!(next, Some('<' | '(' | '[') | None) {
        if is_operator && !matches!(next, Some('<' | '(')) {
            cur.push(' '); // operator new, operator delete[]
        }
    } else if !cur.is_empty() {
        *alts = vec![Vec::new()];
        cur.clear();
    }
}

fn push_segment(alts: &mut [Vec<String>], cur: &mut String) {
    let seg = cur.trim();
    if !seg.is_empty() {
        for a in alts.iter_mut() {
            a.push(seg.to_string());
        }
    }
    cur.clear();
}

/// Index of the bracket closing the one at `open_at` (or `c.len()` if unbalanced).
fn closing(c: &[char], open_at: usize, open: char, close: char) -> usize {
    let mut depth = 0usize;
    let mut i = open_at;
    while i < c.len() {
        let ch = c[i];
        if ch == open {
            depth += 1;
        } else if ch == close && !(close == '>' && i > 0 && c[i - 1] == '-') {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
        i += 1;
    }
    c.len()
}

/// The paths of the inside of `<Type as Trait>` or `<Type>`.
fn qualified(inner: &[char]) -> Vec<Vec<String>> {
    // Find a top-level " as ".
    let mut depth = 0i32;
    let mut split = None;
    for i in 0..inner.len() {
        match inner[i] {
            '<' | '(' | '[' => depth += 1,
            '>' if i > 0 && inner[i - 1] == '-' => {}
            '>' | ')' | ']' => depth -= 1,
            ' ' if depth == 0 && inner[i..].starts_with(&[' ', 'a', 's', ' ']) => {
                split = Some(i);
                break;
            }
            _ => {}
        }
    }
    let (ty, tr) = match split {
        Some(i) => (&inner[..i], Some(&inner[i + 4..])),
        None => (inner, None),
    };
    let mut out = type_paths(ty);
    if let Some(tr) = tr {
        out.extend(parse_paths(tr));
    }
    out.retain(|p| !p.is_empty());
    if out.is_empty() {
        out.push(Vec::new());
    }
    out
}

fn type_paths(ty: &[char]) -> Vec<Vec<String>> {
    let s: String = ty.iter().collect();
    let mut t = s.trim();
    loop {
        let before = t;
        for prefix in ["&mut ", "&", "*const ", "*mut ", "dyn ", "impl ", "mut "] {
            if let Some(rest) = t.strip_prefix(prefix) {
                t = rest.trim_start();
            }
        }
        if t == before {
            break;
        }
    }
    if t.starts_with('[') || t.starts_with('(') || t.starts_with("fn") && t.contains('(') {
        return vec![vec![t.to_string()]];
    }
    let chars: Vec<char> = t.chars().collect();
    parse_paths(&chars)
}

/// Edit distance with adjacent transpositions (optimal string alignment), for "closest
/// names" suggestions: `wrok` is 1 away from `work`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut row = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        row[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (prev[j] + 1).min(row[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut row);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<Vec<String>> {
        name_paths(s)
    }

    fn v(segs: &[&str]) -> Vec<String> {
        segs.iter().map(|s| s.to_string()).collect()
    }

    fn m(pattern: &str, name: &str) -> bool {
        Pattern::parse(pattern).unwrap().matches("", name)
    }

    #[test]
    fn paths_of_rust_names() {
        assert_eq!(
            p("alloc::vec::Vec<T,A>::push"),
            vec![v(&["alloc", "vec", "Vec", "push"])]
        );
        assert_eq!(
            p("<alloc::vec::Vec<u32>>::push"),
            vec![v(&["alloc", "vec", "Vec", "push"])]
        );
        assert_eq!(
            p("<app::Widget as core::fmt::Display>::fmt"),
            vec![
                v(&["app", "Widget", "fmt"]),
                v(&["core", "fmt", "Display", "fmt"])
            ]
        );
        assert_eq!(
            p("<&mut app::W<u8> as core::fmt::Debug>::fmt::{closure#0}"),
            vec![
                v(&["app", "W", "fmt", "{closure#0}"]),
                v(&["core", "fmt", "Debug", "fmt", "{closure#0}"])
            ]
        );
        assert_eq!(
            p("calls::work::{{closure}}"),
            vec![v(&["calls", "work", "{{closure}}"])]
        );
        assert_eq!(
            p("<<a::A as b::B>::C as d::D>::e"),
            vec![
                v(&["a", "A", "C", "e"]),
                v(&["b", "B", "C", "e"]),
                v(&["d", "D", "e"])
            ]
        );
        assert_eq!(p("<[T]>::sort"), vec![v(&["[T]", "sort"])]);
        assert_eq!(
            p("<fn() -> u32 as core::ops::Fn<()>>::call"),
            vec![
                v(&["fn() -> u32", "call"]),
                v(&["core", "ops", "Fn", "call"])
            ]
        );
    }

    #[test]
    fn paths_of_cpp_names() {
        assert_eq!(
            p("ns::Widget::draw(int) const"),
            vec![v(&["ns", "Widget", "draw"])]
        );
        assert_eq!(p("void ns::f<int>(int)"), vec![v(&["ns", "f"])]);
        assert_eq!(
            p("ns::Box<std::vector<int> >::get()"),
            vec![v(&["ns", "Box", "get"])]
        );
        assert_eq!(
            p("(anonymous namespace)::helper(int)"),
            vec![v(&["(anonymous namespace)", "helper"])]
        );
        assert_eq!(
            p("ns::V::operator<<(int)"),
            vec![v(&["ns", "V", "operator<<"])]
        );
        assert_eq!(
            p("ns::V::operator()(int)"),
            vec![v(&["ns", "V", "operator()"])]
        );
        assert_eq!(
            p("ns::V::operator<(ns::V const&)"),
            vec![v(&["ns", "V", "operator<"])]
        );
        assert_eq!(p("operator new(unsigned long)"), vec![v(&["operator new"])]);
        assert_eq!(p("unsigned int ns::g()"), vec![v(&["ns", "g"])]);
        assert_eq!(p("foo() [clone .cold]"), vec![v(&["foo"])]);
        assert_eq!(p("malloc"), vec![v(&["malloc"])]);
    }

    #[test]
    fn whole_segment_suffix_matching() {
        assert!(m("Vec::push", "alloc::vec::Vec<T,A>::push"));
        assert!(m("Vec::push", "<alloc::vec::Vec<u32>>::push"));
        assert!(m("vec::Vec::push", "<alloc::vec::Vec<u32>>::push"));
        assert!(m("push", "alloc::vec::Vec<T,A>::push"));
        assert!(!m("Vec::push", "alloc::string::String::push_str"));
        assert!(!m("Vec::push", "alloc::vec::Vec<T,A>::push_mut"));
        assert!(!m("push", "alloc::vec::Vec<T,A>::push_mut"));
        assert!(!m("ec::push", "alloc::vec::Vec<T,A>::push"));
        assert!(!m("Vec::push", "alloc::vec::Vec<T,A>::push::{{closure}}"));
    }

    #[test]
    fn trait_methods_both_ways() {
        let name = "<app::Widget as core::fmt::Display>::fmt";
        assert!(m("Display::fmt", name));
        assert!(m("Widget::fmt", name));
        assert!(m("fmt", name));
        assert!(m("<Widget as Display>::fmt", name));
        assert!(!m("<Widget as Debug>::fmt", name));
        assert!(!m("Debug::fmt", name));
    }

    #[test]
    fn cpp_and_exact_names() {
        assert!(m("Widget::draw", "ns::Widget::draw(int) const"));
        assert!(m("ns::Widget::draw", "ns::Widget::draw(double)"));
        assert!(!m("Widget::dra", "ns::Widget::draw(int)"));
        assert!(m("malloc", "malloc"));
        assert!(!m("malloc", "__libc_malloc"));
        let pat = Pattern::parse("_ZN2ns6Widget4drawEi").unwrap();
        assert!(pat.matches("_ZN2ns6Widget4drawEi", "ns::Widget::draw(int)"));
        assert!(!pat.matches("_ZN2ns6Widget4drawEd", "ns::Widget::draw(double)"));
        assert!(m("ns::Widget::draw(int)", "ns::Widget::draw(int)"));
        assert!(m("V::operator<<", "ns::V::operator<<(int)"));
        assert!(!m("V::operator<", "ns::V::operator<<(int)"));
        assert!(m("operator()", "ns::V::operator()(int) const"));
    }

    #[test]
    fn bad_patterns() {
        assert!(Pattern::parse("  ").is_err());
        assert!(Pattern::parse("Vec<T::push").is_err());
        assert!(Pattern::parse("::").is_err());
    }

    #[test]
    fn distance() {
        assert_eq!(edit_distance("push", "push"), 0);
        assert_eq!(edit_distance("push", "pish"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("wrok", "work"), 1);
    }
}

/// `LIBRARY:NAME` split at its single colon (never one of a `::`), when what comes before
/// it names a library: a path (with a `/`) or a shared object's file name (with `.so`).
fn split_library(text: &str) -> (Option<&str>, &str) {
    let bytes = text.as_bytes();
    let single = (0..bytes.len()).find(|&i| {
        bytes[i] == b':' && bytes.get(i + 1) != Some(&b':') && (i == 0 || bytes[i - 1] != b':')
    });
    match single {
        Some(i) if text[..i].contains('/') || text[..i].contains(".so") => {
            (Some(&text[..i]), text[i + 1..].trim())
        }
        _ => (None, text),
    }
}

#[cfg(test)]
mod library_tests {
    use super::*;

    #[test]
    fn a_library_before_a_single_colon_is_split_off() {
        let p = Pattern::parse("/usr/lib/x.so:scanstring_unicode").unwrap();
        assert_eq!(p.library(), Some("/usr/lib/x.so"));
        assert_eq!(p.last_segment(), "scanstring_unicode");
        assert_eq!(p.as_str(), "/usr/lib/x.so:scanstring_unicode");
        let p = Pattern::parse("libz.so.1:inflate").unwrap();
        assert_eq!(p.library(), Some("libz.so.1"));
        // Paths of names are no libraries.
        for text in [
            "Vec::push",
            "<a::B as c::D>::f",
            "ns::f(int)",
            "std::vector<int>::push_back",
        ] {
            assert_eq!(Pattern::parse(text).unwrap().library(), None, "{text}");
        }
        assert!(Pattern::parse("libz.so.1:").is_err());
    }
}
