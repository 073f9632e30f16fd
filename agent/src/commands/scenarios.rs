//! `ecn-tuner scenarios`: what is built in.

use crate::error::CliError;
use crate::output::{out, outln};
use clap::Args;
use ecn_env::scenario::{builtin, Scenario, BUILTIN_SCENARIOS};

/// Arguments of `scenarios`.
#[derive(Args)]
pub struct ScenariosArgs {
    /// Print this built-in scenario as TOML.
    #[arg(long, value_name = "NAME")]
    show: Option<String>,
}

/// List built-in scenarios with their size, or print one.
pub fn run(args: ScenariosArgs) -> Result<(), CliError> {
    if let Some(name) = args.show {
        let text =
            builtin(&name).ok_or_else(|| CliError::BadInput(format!("--show '{name}': not a built-in scenario")))?;
        out!("{text}");
        return Ok(());
    }
    outln!("{:<14} {:>6} {:>6}  description", "name", "hosts", "flows");
    for (name, text) in BUILTIN_SCENARIOS {
        let s = Scenario::load(name, None)?;
        // The file's opening comment, all its lines (one alone cut `mixed`'s mid-sentence).
        let about: Vec<&str> =
            text.lines().map_while(|l| l.strip_prefix('#')).map(str::trim).filter(|l| !l.is_empty()).collect();
        let about = about.join(" ");
        outln!("{:<14} {:>6} {:>6}  {}", name, s.fabric.topology.hosts().len(), s.flows.len(), about);
    }
    Ok(())
}
