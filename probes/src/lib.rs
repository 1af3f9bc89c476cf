//! ELF symbols, demangling, uprobes and perf counters.
pub mod capability;
pub mod counters;
pub mod valgrind;
