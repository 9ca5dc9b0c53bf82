//! The `cdtarget` binary: thin wiring around [`cdtarget::cli`].
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    cdtarget::cli::main()
}
