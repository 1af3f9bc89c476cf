//! Code that runs inside the benchmark child process.
#![no_std]
