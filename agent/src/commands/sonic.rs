//! `ecn-tuner sonic`: SONiC-specific tools. `sonic restore` puts back the WRED profiles and
//! queue bindings recorded before ecn-tuner first changed the switch.

use crate::actuator::sonic::layout::{self, DbLayout};
use crate::actuator::sonic::{self, schema::DbIndices};
use crate::error::CliError;
use crate::output::outln;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

/// Where SONiC's databases are: the Redis URL and the database indices (SONiC's defaults
/// where not given), or SONiC's own map of them. Every other flag here needs `--redis` or
/// `--database-config`: given without either, it is refused (where it would be ignored).
#[derive(Args, Debug, Clone)]
pub struct RedisArgs {
    /// The switch's Redis: redis://HOST[:PORT] or unix:///var/run/redis/redis.sock.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// SONiC's map of its databases (`/var/run/redis/sonic-db/database_config.json` on the
    /// switch): each database's Redis instance and index, in place of --redis and the index
    /// flags. A switch with SONiC's multi-database layout (`/etc/sonic/enable_multidb`) needs it.
    #[arg(long, value_name = "FILE")]
    pub database_config: Option<PathBuf>,
    /// Redis database index of CONFIG_DB [default: 4].
    #[arg(long, value_name = "N")]
    pub config_db: Option<i64>,
    /// Redis database index of COUNTERS_DB [default: 2].
    #[arg(long, value_name = "N")]
    pub counters_db: Option<i64>,
    /// Redis database index of STATE_DB (where the recording of the original profiles is kept)
    /// [default: 6].
    #[arg(long, value_name = "N")]
    pub state_db: Option<i64>,
    /// Redis database index of APPL_DB (port speeds that CONFIG_DB lacks) [default: 0].
    #[arg(long, value_name = "N")]
    pub appl_db: Option<i64>,
    /// Redis database index of ASIC_DB (what orchagent programmed, read back after each write)
    /// [default: 1].
    #[arg(long, value_name = "N")]
    pub asic_db: Option<i64>,
    /// Connect, read and write timeout of every Redis call [default: 3s].
    #[arg(long, value_name = "DUR")]
    pub redis_timeout: Option<String>,
    /// Read the Redis password from this file (one line), where a password in the URL would
    /// show in `ps` to every user of the machine.
    #[arg(long, value_name = "FILE")]
    pub redis_password_file: Option<PathBuf>,
}

impl RedisArgs {
    /// Where the databases are, for a command that uses every database.
    pub fn locate_all(&self) -> Result<DbLayout, CliError> {
        self.locate(&DbIndices::default().by_flag().map(|(flag, _)| flag))
    }

    /// Where the databases of the flags in `used` are (`--config-db`, ...): from
    /// `--database-config`, or `--redis` and the index flags (all on one instance).
    pub fn locate(&self, used: &[&str]) -> Result<DbLayout, CliError> {
        let Some(map) = &self.database_config else {
            let url = self.url()?.to_string();
            return Ok(DbLayout { url, dbs: self.dbs_of(used)?, elsewhere: Vec::new(), map: None });
        };
        if self.redis.is_some() {
            return Err(CliError::BadInput(format!(
                "--redis: --database-config {} says where each database is; give one of the two",
                map.display()
            )));
        }
        if let Some((flag, _)) = self.indices_given().iter().find(|(_, v)| v.is_some()) {
            return Err(CliError::BadInput(format!(
                "{flag}: --database-config {} gives every database's index; drop the flag",
                map.display()
            )));
        }
        layout::read(map, used).map_err(|e| CliError::BadInput(format!("--database-config {e}")))
    }

    /// The database indices, for a command that uses only those of the flags in `used`: one of
    /// the others given is refused (it would be ignored), and only the used ones must differ.
    fn dbs_of(&self, used: &[&str]) -> Result<DbIndices, CliError> {
        let d = DbIndices::default();
        let dbs = DbIndices {
            appl: self.appl_db.unwrap_or(d.appl),
            asic: self.asic_db.unwrap_or(d.asic),
            counters: self.counters_db.unwrap_or(d.counters),
            config: self.config_db.unwrap_or(d.config),
            state: self.state_db.unwrap_or(d.state),
        };
        // Each SONiC database has an index of its own: two flags naming one would, for one,
        // put the recording of the original profiles into CONFIG_DB, which `config save` keeps.
        if let Some((flag, _)) = self.indices_given().iter().find(|(flag, v)| v.is_some() && !used.contains(flag)) {
            return Err(CliError::BadInput(format!(
                "{flag}: not used here (only {}); drop the flag",
                used.join(" and ")
            )));
        }
        let named: Vec<(&str, i64)> = dbs.by_flag().into_iter().filter(|(flag, _)| used.contains(flag)).collect();
        for (i, (flag, db)) in named.iter().enumerate() {
            if *db < 0 {
                return Err(CliError::BadInput(format!("{flag} {db}: a Redis database index is 0 or more")));
            }
            if let Some((other, _)) = named[..i].iter().find(|(_, d)| d == db) {
                return Err(CliError::BadInput(format!(
                    "{flag} {db}: the same index as {other}; every SONiC database has its own"
                )));
            }
        }
        Ok(dbs)
    }

    /// `--redis-timeout`.
    pub fn timeout(&self) -> Result<Duration, CliError> {
        super::positive_duration("--redis-timeout", self.redis_timeout.as_deref().unwrap_or("3s"))
    }

    /// `--redis-password-file`'s password, if given.
    pub fn password(&self) -> Result<Option<String>, CliError> {
        let read = |p: &PathBuf| crate::actuator::security::read_password_file("--redis-password-file", p);
        Ok(self.redis_password_file.as_ref().map(read).transpose()?)
    }

    /// `--redis`, required without `--database-config`: also where a flag that needs it is
    /// given without it.
    fn url(&self) -> Result<&str, CliError> {
        match (&self.redis, self.flag_given()) {
            (Some(url), _) => Ok(url),
            (None, Some(flag)) => Err(CliError::BadInput(format!(
                "{flag}: needs --redis URL, the switch's Redis (or --database-config FILE, SONiC's map of its databases)"
            ))),
            (None, None) => Err(CliError::BadInput(
                "--redis URL (or --database-config FILE): required for SONiC".into(),
            )),
        }
    }

    /// Each database flag, with its value where given.
    fn indices_given(&self) -> [(&'static str, Option<i64>); 5] {
        [
            ("--config-db", self.config_db),
            ("--counters-db", self.counters_db),
            ("--state-db", self.state_db),
            ("--appl-db", self.appl_db),
            ("--asic-db", self.asic_db),
        ]
    }

    /// The first flag given, `--redis` and `--database-config` included, if any.
    pub fn flag_given(&self) -> Option<&'static str> {
        let redis = self.redis.is_some().then_some("--redis");
        redis
            .or_else(|| self.database_config.is_some().then_some("--database-config"))
            .or_else(|| self.indices_given().into_iter().find_map(|(flag, v)| v.map(|_| flag)))
            .or_else(|| self.redis_timeout.is_some().then_some("--redis-timeout"))
            .or_else(|| self.redis_password_file.is_some().then_some("--redis-password-file"))
    }
}

/// Arguments of `sonic`.
#[derive(Args)]
pub struct SonicArgs {
    #[command(subcommand)]
    command: SonicCommand,
}

#[derive(Subcommand)]
enum SonicCommand {
    /// Put back the WRED_PROFILE and QUEUE entries recorded before ecn-tuner first changed the
    /// switch, byte for byte, and delete the ECN_TUNER_* profiles it created. Stop the actuator
    /// first.
    #[command(allow_negative_numbers = true)]
    Restore(RestoreArgs),
}

#[derive(Args)]
struct RestoreArgs {
    #[command(flatten)]
    redis: RedisArgs,
    /// Read the recording from this file (`<journal>.sonic-originals.json`) instead of STATE_DB,
    /// e.g. after a reboot emptied STATE_DB.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// The switch name the actuator ran with, if it was given one with --switch-name; by
    /// default the switch's hostname. A recording of another switch is refused.
    #[arg(long, value_name = "NAME")]
    switch_name: Option<String>,
}

/// `--from`, its symbolic links resolved: a restore retires the recording by renaming it, and
/// renamed the link (or `/dev/stdin` itself), leaving the recording to be restored again.
/// Anything but a regular file (a pipe, a device) is refused.
fn recording_file(path: &std::path::Path) -> Result<PathBuf, CliError> {
    let bad = |why: String| CliError::BadInput(format!("--from {}: {why}", path.display()));
    let file = std::fs::canonicalize(path).map_err(|e| bad(e.to_string()))?;
    let meta = std::fs::metadata(&file).map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad(format!(
            "{} is not a regular file; give the recording's file itself, which the restore renames once done",
            file.display()
        )));
    }
    Ok(file)
}

/// Run `sonic ...`.
pub fn run(a: SonicArgs) -> Result<(), CliError> {
    match a.command {
        SonicCommand::Restore(r) => restore(r),
    }
}

fn restore(a: RestoreArgs) -> Result<(), CliError> {
    let at = a.redis.locate(&crate::actuator::sonic::schema::RESTORE_DB_FLAGS)?;
    let dbs = at.dbs;
    let from = a.from.as_deref().map(recording_file).transpose()?;
    let password = a.redis.password()?;
    let (timeout, switch) = (a.redis.timeout()?, a.switch_name.as_deref());
    let report = sonic::restore(&at, from.as_deref(), switch, timeout, password.as_deref())?;
    if report.nothing_recorded && !report.tuner_profiles_unrecorded.is_empty() {
        // A script must not read "nothing to restore" as a switch back on its originals.
        let n = report.tuner_profiles_unrecorded.len();
        return Err(CliError::Failed(format!(
            "no recording of original profiles in STATE_DB (db {}) at {url}, but CONFIG_DB holds {n} ecn-tuner \
             profile(s) ({}): ecn-tuner changed this switch and the recording was lost (a reboot clears STATE_DB); \
             restore from the copy beside the actuator's journal: --from JOURNAL.sonic-originals.json",
            dbs.state,
            report.tuner_profiles_unrecorded.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            url = crate::actuator::sonic::conn::redact_password(at.url_of(dbs.state))
        )));
    }
    if report.nothing_recorded {
        outln!(
            "nothing to restore: no recording of original profiles in STATE_DB (db {}) at {url}: no actuator has \
             changed this switch since the last restore, or its recording was lost (give the copy beside its \
             journal with --from FILE)",
            dbs.state,
            url = crate::actuator::sonic::conn::redact_password(at.url_of(dbs.state))
        );
        return Ok(());
    }
    outln!(
        "restored {} WRED profile(s) and {} queue binding(s) to their recorded originals; removed {} ecn-tuner profile(s)",
        report.profiles_restored, report.queues_restored, report.profiles_removed
    );
    for k in &report.left_alone {
        outln!("left alone (not in the recording, not created by ecn-tuner): {k}");
    }
    for k in &report.changed_elsewhere {
        outln!("left as it is (changed since the recording, where ecn-tuner does not write): {k}");
    }
    for k in &report.gone {
        outln!("not written back: {k} is recorded but no longer in CONFIG_DB (its port removed?)");
    }
    for (profile, queue) in &report.kept_bound {
        outln!(
            "kept {profile}, an ecn-tuner profile: {queue}, whose binding the restore leaves alone, is bound to it; bind that \
             queue to another profile, then delete this one"
        );
    }
    if let Some((file, e)) = report.not_retired.first() {
        // STATE_DB's recording is gone: an actuator started beside this file would put it back,
        // and a later restore would undo everything changed since, an operator's edits too.
        return Err(CliError::Failed(format!(
            "restored, but the file copy of the recording could not be retired (renamed *.restored-<ms>): {}: {e}; \
             move it away before an actuator starts with the journal beside it",
            file.display()
        )));
    }
    Ok(())
}
