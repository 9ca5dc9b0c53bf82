//! `cdtarget completion SHELL`: a completion script generated from the very clap `Command` the
//! binary parses its arguments with, so it offers exactly the subcommands and flags there are.

use std::io::{self, Write};

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// Writes the completion script of `shell` for the `cdtarget` binary.
pub fn completion_command(shell: Shell, out: &mut impl Write) -> io::Result<bool> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "cdtarget", &mut script);
    out.write_all(&script)?;
    out.flush()?;
    Ok(true)
}
