//! CLI errors and their exit codes (PRODUCT.md "The CLI contract": 2 for bad input, 1 for
//! any other failure).

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
}

impl From<ecn_env::scenario::ScenarioError> for CliError {
    fn from(e: ecn_env::scenario::ScenarioError) -> Self {
        CliError::BadInput(e.to_string())
    }
}
