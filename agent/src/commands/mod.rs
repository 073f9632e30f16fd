//! One module per subcommand.

pub mod scenarios;
pub mod sim;
