//! One module per subcommand.
//!
//! The argument structs' doc comments are also the `--help` text, where `<KMIN>` and
//! `[:SEED]` are usage syntax, not HTML or intra-doc links; rustdoc is told so here.
#![allow(rustdoc::invalid_html_tags, rustdoc::broken_intra_doc_links)]

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
