//! ELF symbols, demangling, uprobes and perf counters.
