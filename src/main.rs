//! The `cdtarget` binary: thin wiring around [`cdtarget::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    cdtarget::cli::main()
}
