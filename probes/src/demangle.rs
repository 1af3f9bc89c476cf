//! Demangling of Rust (legacy and v0) and C++ (Itanium) symbol names.

/// A demangled name: `label` keeps what tells functions apart (C++ parameter lists, Rust
/// v0 generic arguments), `hash` is the legacy Rust hash dropped from the label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demangled {
    /// Human-readable name; the raw name when it is not mangled.
    pub label: String,
    /// Legacy Rust hash (`h0123abcd...`), which distinguishes monomorphizations whose
    /// demangled names are equal.
    pub hash: Option<String>,
    /// Which scheme was recognised.
    pub scheme: Scheme,
}

/// A mangling scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Rust legacy (`_ZN...17h<hash>E`).
    RustLegacy,
    /// Rust v0 (`_R...`).
    RustV0,
    /// C++ Itanium ABI (`_Z...`).
    Cpp,
    /// Not mangled (C, assembly).
    Plain,
}

/// Demangle `raw`. Rust names lose their hash; C++ names keep their parameter list.
pub fn demangle(raw: &str) -> Demangled {
    // GCC clones and LLVM suffixes (`.cold`, `.llvm.123`) stay visible in the label.
    if raw.starts_with("_R") || raw.starts_with("_ZN") {
        if let Ok(d) = rustc_demangle::try_demangle(raw) {
            let plain = format!("{d:#}");
            let full = format!("{d}");
            let is_v0 = raw.starts_with("_R");
            let hash = full
                .strip_prefix(plain.as_str())
                .and_then(|rest| rest.strip_prefix("::"))
                .filter(|h| h.starts_with('h') && h.len() == 17)
                .map(str::to_string);
            // A legacy name without the Rust hash may well be a C++ name such as
            // `_ZN2ns1fEv`; let the C++ demangler decide then.
            if is_v0 || hash.is_some() {
                return Demangled {
                    label: plain,
                    hash,
                    scheme: if is_v0 {
                        Scheme::RustV0
                    } else {
                        Scheme::RustLegacy
                    },
                };
            }
        }
    }
    if raw.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(raw) {
            if let Ok(label) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return Demangled {
                    label,
                    hash: None,
                    scheme: Scheme::Cpp,
                };
            }
        }
        if let Ok(d) = rustc_demangle::try_demangle(raw) {
            return Demangled {
                label: format!("{d:#}"),
                hash: None,
                scheme: Scheme::RustLegacy,
            };
        }
    }
    Demangled {
        label: raw.to_string(),
        hash: None,
        scheme: Scheme::Plain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_legacy_drops_hash() {
        let d = demangle("_ZN5alloc3vec16Vec$LT$T$C$A$GT$4push17h0123456789abcdefE");
        assert_eq!(d.label, "alloc::vec::Vec<T,A>::push");
        assert_eq!(d.hash.as_deref(), Some("h0123456789abcdef"));
        assert_eq!(d.scheme, Scheme::RustLegacy);
    }

    #[test]
    fn rust_v0() {
        // <alloc::vec::Vec<u32>>::push
        let d = demangle("_RNvMs_NtCs1234_5alloc3vecINtB4_3VecmE4push");
        assert_eq!(d.scheme, Scheme::RustV0);
        assert_eq!(d.label, "<alloc::vec::Vec<u32>>::push");
    }

    #[test]
    fn cpp_keeps_parameters() {
        let d = demangle("_ZN2ns6Widget4drawEi");
        assert_eq!(d.scheme, Scheme::Cpp);
        assert_eq!(d.label, "ns::Widget::draw(int)");
        let d = demangle("_ZN2ns1fEv");
        assert_eq!(d.label, "ns::f()");
    }

    #[test]
    fn plain_c() {
        let d = demangle("malloc");
        assert_eq!(d.label, "malloc");
        assert_eq!(d.scheme, Scheme::Plain);
    }
}
