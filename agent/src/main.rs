//! `ecn-tuner`: learn and apply per-queue ECN settings for RoCEv2 fabrics.
//!
//! Subcommands live in [`commands`]; each returns a [`CliError`](error::CliError) whose kind
//! decides the exit code. Logs go to stderr (`ECN_TUNER_LOG` sets the filter), results to
//! stdout.

mod actuator;
mod capture;
mod commands;
mod compare;
mod controller;
mod error;
mod explore;
mod grpc_timeout;
mod learn;
mod learned;
mod line_files;
mod open_files;
mod output;
mod plot;
mod policy;
mod recommend;
mod report;
mod rollout;
mod slots;
mod stop_signals;
mod telemetry_input;
mod threads;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// A corrupt telemetry file can ask the Parquet decoder for exabytes: exit 2 naming the file,
/// not abort ([`ecn_datasets::decoding`]).
#[global_allocator]
static ALLOCATOR: ecn_datasets::decoding::ReportingAllocator = ecn_datasets::decoding::ReportingAllocator;

/// Learn and apply per-queue ECN settings (Kmin, Kmax, Pmax) for RoCEv2 fabrics running DCQCN.
#[derive(Parser)]
#[command(name = "ecn-tuner", version, about, long_about = None)]
struct Cli {
    /// More log output on stderr (-v: debug, -vv: trace). ECN_TUNER_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

// Every subcommand takes `-1` or `-0.1` as a flag's value, so that the flag's own check names
// it (`--gamma -0.1: must be in [0, 1)`); read as a flag, it was "unexpected argument '-0'".
// `negative_values_joined` covers a negative right after its flag, in every form; this, one
// among a flag's later values (`--eval-seed 9001 -5`).
#[derive(Subcommand)]
enum Command {
    /// Run one scenario on the packet-level simulator and report FCT slowdown, pauses and queues.
    #[command(allow_negative_numbers = true)]
    Sim(commands::sim::SimArgs),
    /// Compare policies: every policy on every scenario over several seeds, in parallel.
    #[command(allow_negative_numbers = true)]
    Eval(commands::eval::EvalArgs),
    /// Learn a policy with Double DQN in the simulator and write a checkpoint, its model card
    /// and its training curve.
    #[command(allow_negative_numbers = true)]
    Train(Box<commands::train::TrainArgs>),
    /// Write telemetry as Parquet for offline learning: from a scenario under a behaviour policy
    /// (default: explore), or from a live actuator for a duration.
    #[command(allow_negative_numbers = true)]
    Record(commands::record::RecordArgs),
    /// Recommend a setting for every queue from recorded or live telemetry, with the expected
    /// effect and a confidence; keeps the current setting when unsure. Changes nothing (live
    /// telemetry passes through a scratch file in TMPDIR).
    #[command(allow_negative_numbers = true)]
    Recommend(commands::recommend::RecommendArgs),
    /// List the built-in scenarios, or print one as TOML to start your own from.
    #[command(allow_negative_numbers = true)]
    Scenarios(commands::scenarios::ScenariosArgs),
    /// Serve a fabric's ECN settings over gRPC (sim, dry-run or sonic backend), with switch-side
    /// safety: validation, a single writer, commit-confirm with automatic revert, a journal.
    #[command(allow_negative_numbers = true)]
    Actuator(Box<commands::actuator::ActuatorArgs>),
    /// The online controller: watch an actuator's telemetry and decide ECN settings, in shadow
    /// mode (log only) or enforce mode (apply, health-check, confirm or roll back).
    // A later occurrence of a flag overrides an earlier one, so wrappers such as
    // scripts/quickstart can set defaults that the user's own flags replace.
    #[command(args_override_self = true, allow_negative_numbers = true)]
    Run(Box<commands::run::RunArgs>),
    /// Check telemetry files (Parquet or CSV) against the schema and the validation rules;
    /// with --repair, fix what can safely be fixed and optionally write the result.
    #[command(allow_negative_numbers = true)]
    Validate(commands::validate::ValidateArgs),
    /// SONiC tools: `sonic restore` puts back the WRED profiles recorded before ecn-tuner first
    /// changed the switch.
    #[command(allow_negative_numbers = true)]
    Sonic(commands::sonic::SonicArgs),
}

/// `--flag -1e-3` as `--flag=-1e-3`: clap takes `-1` and `-0.5` for values of the flag before
/// them (`allow_negative_numbers`) but not `-1e-3` or `-.5`, which it read as unknown flags, so
/// the flag's own check, which names it, never saw them. Only a whole argument that reads as a
/// number is joined; nothing here takes a negative number as a positional argument.
fn negative_values_joined(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = Vec::new();
    for arg in args {
        let negative_number = arg.to_str().is_some_and(|a| {
            a.starts_with('-')
                && a[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.')
                && a.parse::<f64>().is_ok()
        });
        match out.last_mut() {
            Some(flag) if negative_number && flag.to_str().is_some_and(|f| f.starts_with("--") && !f.contains('=')) => {
                flag.push("=");
                flag.push(&arg);
            }
            _ => out.push(arg),
        }
    }
    out
}

/// Why a valid `ECN_TUNER_LOG` filter may show no line at all, if it may: one without a
/// directive, or naming a target with `-` (the binary's name, `ecn-tuner`, where targets are
/// Rust paths: `ecn_tuner`), which leaves every other target, warnings included, off.
fn filter_that_may_show_nothing(filter: &str) -> Option<String> {
    let directives: Vec<&str> = filter.split(',').map(str::trim).filter(|d| !d.is_empty()).collect();
    if directives.is_empty() {
        return Some(format!("{filter:?} enables nothing: no log line, warnings included, will show (try `info`)"));
    }
    let dashed = directives.iter().find(|d| d.split(['=', '[']).next().is_some_and(|t| t.contains('-')))?;
    Some(format!(
        "`{dashed}` names a target with `-`, which none has (targets are Rust paths: `ecn_tuner`, `ecn_env`, ...); \
         lines of other targets show only as its other directives allow"
    ))
}

/// Print clap's help, version or usage error, and its exit code; clap's own exit ignored a
/// failed write (`--help > /dev/full` exited 0, nothing written). A closed pipe (`--help |
/// head`) is no failure, as for every other output.
fn said_by_clap(e: clap::Error) -> ExitCode {
    use std::io::Write;
    let code = u8::try_from(e.exit_code()).unwrap_or(2);
    match e.print().and_then(|()| std::io::stdout().flush()) {
        Err(w) if w.kind() != std::io::ErrorKind::BrokenPipe => {
            let to = if e.use_stderr() { "stderr" } else { "stdout" };
            // Where stderr is what failed, the exit code alone can say it.
            let _ = writeln!(std::io::stderr(), "error: writing to {to}: {w}");
            ExitCode::from(code.max(1))
        }
        _ => ExitCode::from(code),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(negative_values_joined(std::env::args_os())) {
        Ok(cli) => cli,
        Err(e) => return said_by_clap(e),
    };
    // -v is for ecn-tuner's own detail: the gRPC and HTTP/2 libraries' debug lines (a frame
    // each) would bury it, so they stay at info unless -vv.
    let ours = ["ecn_tuner", "ecn_env", "ecn_models", "ecn_datasets", "journal"];
    let default = match cli.verbose {
        0 => "info".to_string(),
        1 => {
            std::iter::once("info".to_string()).chain(ours.map(|t| format!("{t}=debug"))).collect::<Vec<_>>().join(",")
        }
        _ => {
            std::iter::once("debug".to_string()).chain(ours.map(|t| format!("{t}=trace"))).collect::<Vec<_>>().join(",")
        }
    };
    let from_env = std::env::var("ECN_TUNER_LOG").ok().filter(|v| !v.is_empty());
    let (filter, bad_env) = match from_env.as_deref().map(tracing_subscriber::EnvFilter::try_new) {
        Some(Ok(f)) => (f, None),
        Some(Err(e)) => (tracing_subscriber::EnvFilter::new(&default), Some(e.to_string())),
        None => (tracing_subscriber::EnvFilter::new(&default), None),
    };
    // Colours only on a terminal, and not where the user turned them off (NO_COLOR, set to
    // anything, or a terminal that cannot show them): logs piped to a file or a collector stay
    // plain text.
    let ansi = output::stderr_redraws() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    output::log_in_background();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| output::Stderr)
        // Where a line comes from only matters to someone filtering: at -v or a chosen filter.
        .with_target(cli.verbose > 0 || from_env.is_some())
        .with_ansi(ansi)
        .init();
    if let Some(why) = bad_env {
        tracing::warn!("ECN_TUNER_LOG is not a valid filter ({why}); logging at the default level instead");
    } else if let Some(why) = from_env.as_deref().and_then(filter_that_may_show_nothing) {
        // Said past the filter, which may let nothing through, warnings included.
        output::errln!("warning: ECN_TUNER_LOG: {why}");
    }

    // A decoder that panics on a corrupt file becomes that file's error line; the panic's own
    // message and backtrace would only bury it.
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if ecn_datasets::decoding::is_decoding() {
            tracing::debug!("the Parquet decoder panicked: {info}");
        } else {
            report_panic(info);
        }
    }));

    if let Command::Train(a) = &cli.command {
        commands::train::before_libtorch(a);
    }
    // Networks here are small: one libtorch thread per caller beats a thread pool that
    // spins against the simulators for the same cores.
    tch::set_num_threads(1);
    tch::set_num_interop_threads(1);
    let result = match cli.command {
        Command::Sim(a) => commands::sim::run(a),
        Command::Eval(a) => commands::eval::run(a),
        Command::Train(a) => commands::train::run(*a),
        Command::Record(a) => commands::record::run(a),
        Command::Recommend(a) => commands::recommend::run(a),
        Command::Scenarios(a) => commands::scenarios::run(a),
        Command::Actuator(a) => commands::actuator::run(*a),
        Command::Run(a) => commands::run::run(*a),
        Command::Validate(a) => commands::validate::run(a),
        Command::Sonic(a) => commands::sonic::run(a),
    };
    let code = match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Folders made for outputs that never came are not left behind, empty.
            commands::remove_created_folders();
            output::errln!("error: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    };
    output::flush_logs(output::FLUSH_AT_EXIT);
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filter that lets nothing through, or names the binary instead of a target, is said to.
    #[test]
    fn log_filters_that_may_show_nothing_are_named() {
        assert!(filter_that_may_show_nothing(",").is_some_and(|w| w.contains("enables nothing")));
        assert!(filter_that_may_show_nothing("ecn-tuner=debug").is_some_and(|w| w.contains("`ecn_tuner`")));
        for fine in ["info", "warn,ecn_tuner::controller=debug", "info,journal=off", "debug"] {
            assert_eq!(filter_that_may_show_nothing(fine), None, "{fine}");
        }
    }

    #[test]
    fn negative_numbers_join_the_flag_before_them() {
        let args = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let joined = negative_values_joined(
            args(&["t", "--gamma", "-1e-1", "--x", "-.5", "-v", "--y=-2", "--z", "-"]).into_iter(),
        );
        assert_eq!(joined, args(&["t", "--gamma=-1e-1", "--x=-.5", "-v", "--y=-2", "--z", "-"]));
        // Not a number, or not after a long flag: left alone.
        let kept = args(&["t", "-v", "-1", "--f", "-inf", "--g", "-x1"]);
        assert_eq!(negative_values_joined(kept.clone().into_iter()), kept);
    }
}
