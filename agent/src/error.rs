//! CLI errors and their exit codes (PRODUCT.md "The CLI contract": 2 for bad input, 1 for
//! any other failure).

/// An error with its causes, each once: tonic's errors read "transport error" alone, where a
/// cause says what failed (a refused connection, "Too many open files", a certificate expired
/// or not yet valid by this host's clock, a key that does not match its certificate).
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    causes_after(e.to_string(), e.source())
}

/// `said`, then each error of the chain from `cause` on that it does not say yet (the chain
/// repeats its links' words: "transport error: transport error: ...").
pub fn causes_after(mut said: String, mut cause: Option<&(dyn std::error::Error + 'static)>) -> String {
    while let Some(c) = cause {
        let text = c.to_string();
        if !said.contains(&text) {
            said.push_str(": ");
            said.push_str(&text);
        }
        cause = c.source();
    }
    said
}

/// A failure of a subcommand.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The user's input is wrong: a flag, a file, a field. Exit code 2.
    #[error("{0}")]
    BadInput(String),
    /// Anything else (I/O on output files, internal errors). Exit code 1.
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::BadInput(_) => 2,
            CliError::Failed(_) => 1,
        }
    }

    /// An output path the user named that cannot be opened or made, said as `said`: bad input
    /// (exit 2), unless the disk is full or out of inodes, which is the machine's (exit 1).
    pub fn output_path(said: String, e: &std::io::Error) -> CliError {
        if crate::line_files::out_of_space(e) {
            CliError::Failed(said)
        } else {
            CliError::BadInput(said)
        }
    }

    /// The same error, its message prefixed with `FLAG VALUE: ` unless it already names
    /// `value`: where one process talks to several actuators, every error says which one it is
    /// about.
    pub fn about(self, flag: &str, value: &str) -> CliError {
        let name = |m: String| if m.contains(value) { m } else { format!("{flag} {value}: {m}") };
        match self {
            CliError::BadInput(m) => CliError::BadInput(name(m)),
            CliError::Failed(m) => CliError::Failed(name(m)),
        }
    }

    /// The same error and exit code, with `more` said after its message.
    pub fn and(self, more: &str) -> CliError {
        match self {
            CliError::BadInput(m) => CliError::BadInput(format!("{m}; {more}")),
            CliError::Failed(m) => CliError::Failed(format!("{m}; {more}")),
        }
    }
}

impl From<ecn_env::scenario::ScenarioError> for CliError {
    fn from(e: ecn_env::scenario::ScenarioError) -> Self {
        CliError::BadInput(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_names_its_subject_once_and_keeps_its_exit_code() {
        let e = CliError::Failed("AcquireWriter: FailedPrecondition: writer role held".into())
            .about("--target", "http://b:1");
        assert_eq!(e.to_string(), "--target http://b:1: AcquireWriter: FailedPrecondition: writer role held");
        assert_eq!(e.exit_code(), 1);
        let e =
            CliError::BadInput("the actuator at http://b:1 reports no queues".into()).about("--target", "http://b:1");
        assert_eq!(e.to_string(), "the actuator at http://b:1 reports no queues");
        assert_eq!(e.exit_code(), 2);
    }
}
