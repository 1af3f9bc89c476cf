#!/usr/bin/env bash
# Confirmation runs (--confirm) simulated: A/A false alarms and detection power of the
# history gate at depths 1, 5 and 20, with the first look alone and with confirmation
# (collector/benches/confirm.rs; seeded, so the table repeats exactly). The table goes
# to stdout, in the form BENCHMARKS.md and docs/statistics.md quote it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p sbs-profile --bench confirm 2>/dev/null
