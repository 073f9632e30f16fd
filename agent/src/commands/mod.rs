//! One module per subcommand.

pub mod actuator;
pub mod eval;
pub mod recommend;
pub mod record;
pub mod run;
pub mod scenarios;
pub mod sim;
pub mod sonic;
pub mod train;
pub mod validate;
