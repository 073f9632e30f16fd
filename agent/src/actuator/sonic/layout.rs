//! SONiC's own map of its databases, `database_config.json`
//! (`/var/run/redis/sonic-db/database_config.json` on a switch): which Redis instance holds each
//! database, under which index. Most switches run one instance with SONiC's default indices,
//! which `--redis` and the index flags describe; a switch with SONiC's multi-database layout
//! (`/etc/sonic/enable_multidb`) spreads them over several instances, and only its map says
//! where.
//!
//! ```json
//! { "INSTANCES": { "redis":  { "hostname": "127.0.0.1", "port": 6379, "unix_socket_path": "/var/run/redis/redis.sock" },
//!                  "redis2": { "hostname": "127.0.0.1", "port": 6380, "unix_socket_path": "/var/run/redis/redis2.sock" } },
//!   "DATABASES": { "CONFIG_DB":   { "id": 4, "separator": "|", "instance": "redis" },
//!                  "COUNTERS_DB": { "id": 2, "separator": ":", "instance": "redis2" }, ... } }
//! ```

use super::schema::DbIndices;
use redis::IntoConnectionInfo;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The largest map read: SONiC's are about 2 KB.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Where the databases a command uses are, from a map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbLayout {
    /// The instance that holds CONFIG_DB, as a URL (`unix:///PATH` or `redis://HOST:PORT`):
    /// the one messages name, as they name `--redis`.
    pub url: String,
    /// Every database's index (SONiC's defaults for those the command does not use and the
    /// map lacks).
    pub dbs: DbIndices,
    /// The databases used that are on another instance than CONFIG_DB's: index and URL.
    pub elsewhere: Vec<(i64, String)>,
    /// The map it was read from (`None`: `--redis` and the index flags), which messages name.
    pub map: Option<PathBuf>,
}

impl DbLayout {
    /// The URL of the instance that holds database `db`.
    pub fn url_of(&self, db: i64) -> &str {
        self.elsewhere.iter().find(|(d, _)| *d == db).map_or(&self.url, |(_, url)| url)
    }
}

/// Read the map at `path` for a command that uses the databases of the flags in `used`
/// (`--config-db`, ...; CONFIG_DB always). Errors name the file and the entry.
pub fn read(path: &Path, used: &[&str]) -> Result<DbLayout, String> {
    let text = ecn_datasets::bounded::read_text_at_most(path, MAX_FILE_BYTES)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let layout = parse(&text, used).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(DbLayout { map: Some(path.to_path_buf()), ..layout })
}

/// [`read`] on the map's text.
pub fn parse(text: &str, used: &[&str]) -> Result<DbLayout, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let databases = doc.get("DATABASES").and_then(Value::as_object).ok_or("no DATABASES object")?;
    let instances = doc.get("INSTANCES").and_then(Value::as_object).ok_or("no INSTANCES object")?;
    let mut dbs = DbIndices::default();
    let mut placed: Vec<(&str, i64, String)> = Vec::new();
    for (flag, name, index) in dbs.by_name_mut() {
        let needed = flag == "--config-db" || used.contains(&flag);
        let Some(entry) = databases.get(name) else {
            if needed {
                return Err(format!("DATABASES.{name}: missing"));
            }
            continue;
        };
        let id = entry
            .get("id")
            .and_then(Value::as_i64)
            .filter(|id| *id >= 0)
            .ok_or(format!("DATABASES.{name}.id: a Redis database index, 0 or more"))?;
        *index = id;
        if !needed {
            continue;
        }
        let instance =
            entry.get("instance").and_then(Value::as_str).ok_or(format!("DATABASES.{name}.instance: missing"))?;
        let at =
            instances.get(instance).ok_or(format!("DATABASES.{name}: instance {instance:?} is not in INSTANCES"))?;
        let url = instance_url(at).map_err(|e| format!("INSTANCES.{instance}: {e}"))?;
        // Connections are opened by index, so two databases under one index, even on two
        // instances, could not be told apart (SONiC's own maps never do this).
        if let Some((other, _, _)) = placed.iter().find(|(_, i, _)| *i == id) {
            return Err(format!("DATABASES.{name}: index {id} is {other}'s too; every SONiC database has its own"));
        }
        placed.push((name, id, url));
    }
    let url =
        placed.iter().find(|(name, _, _)| *name == "CONFIG_DB").map(|(_, _, url)| url.clone()).unwrap_or_default();
    let elsewhere = placed.into_iter().filter(|(_, _, u)| *u != url).map(|(_, id, u)| (id, u)).collect();
    Ok(DbLayout { url, dbs, elsewhere, map: None })
}

/// An instance's URL: its Unix socket where it has one (SONiC's own tools use it on the
/// switch), else its host and port. Checked here, so that a bad entry is the map's error.
fn instance_url(at: &Value) -> Result<String, String> {
    if let Some(path) = at.get("unix_socket_path").and_then(Value::as_str).filter(|p| !p.is_empty()) {
        // A URL's path would read `%`, `?` and `#` as its own syntax, and reach another socket.
        if !path.starts_with('/') || path.contains(['%', '?', '#']) || path.chars().any(char::is_control) {
            return Err(format!(
                "unix_socket_path {path:?}: an absolute path without `%`, `?`, `#` or control characters"
            ));
        }
        return Ok(format!("unix://{path}"));
    }
    let host = at.get("hostname").and_then(Value::as_str).filter(|h| !h.is_empty());
    let port = at.get("port").and_then(Value::as_u64).filter(|p| (1..=65_535).contains(p));
    let url = match (host, port) {
        (Some(host), Some(port)) if host.contains(':') => format!("redis://[{host}]:{port}"),
        (Some(host), Some(port)) => format!("redis://{host}:{port}"),
        _ => return Err("neither a unix_socket_path nor a hostname and port (1–65535)".into()),
    };
    url.as_str().into_connection_info().map_err(|e| format!("hostname {:?}: not a host ({e})", host.unwrap_or("")))?;
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [&str; 5] = ["--config-db", "--state-db", "--counters-db", "--appl-db", "--asic-db"];

    /// SONiC's single-instance map, as `database_config.json.j2` renders it (abridged).
    const SINGLE: &str = r#"{
        "INSTANCES": { "redis": { "hostname": "127.0.0.1", "port": 6379,
                                  "unix_socket_path": "/var/run/redis/redis.sock", "persistence_for_warm_boot": "yes" } },
        "DATABASES": {
            "APPL_DB": { "id": 0, "separator": ":", "instance": "redis" },
            "ASIC_DB": { "id": 1, "separator": ":", "instance": "redis" },
            "COUNTERS_DB": { "id": 2, "separator": ":", "instance": "redis" },
            "LOGLEVEL_DB": { "id": 3, "separator": ":", "instance": "redis" },
            "CONFIG_DB": { "id": 4, "separator": "|", "instance": "redis" },
            "FLEX_COUNTER_DB": { "id": 5, "separator": ":", "instance": "redis" },
            "STATE_DB": { "id": 6, "separator": "|", "instance": "redis" } },
        "VERSION": "1.0" }"#;

    #[test]
    fn a_single_instance_gives_the_indices_and_its_socket() {
        let l = parse(SINGLE, &ALL).unwrap();
        assert_eq!(l.url, "unix:///var/run/redis/redis.sock");
        assert_eq!(l.dbs, DbIndices::default());
        assert!(l.elsewhere.is_empty());
    }

    #[test]
    fn databases_on_other_instances_are_routed_there() {
        let multi = SINGLE
            .replace(r#""redis": {"#, r#""redis2": { "hostname": "10.0.0.2", "port": 6380 }, "redis": {"#)
            .replace(
                r#""COUNTERS_DB": { "id": 2, "separator": ":", "instance": "redis" }"#,
                r#""COUNTERS_DB": { "id": 2, "separator": ":", "instance": "redis2" }"#,
            );
        let l = parse(&multi, &ALL).unwrap();
        assert_eq!(l.elsewhere, vec![(2, "redis://10.0.0.2:6380".to_string())]);
        // A command that does not read COUNTERS_DB does not reach for it.
        assert!(parse(&multi, &["--config-db", "--state-db"]).unwrap().elsewhere.is_empty());
    }

    #[test]
    fn a_broken_map_is_refused_naming_the_entry() {
        let cases = [
            ("[]", "no DATABASES"),
            (r#"{"DATABASES": {}}"#, "no INSTANCES"),
            (&SINGLE.replace("\"STATE_DB\"", "\"STATE\""), "DATABASES.STATE_DB: missing"),
            (&SINGLE.replace("\"id\": 6", "\"id\": -6"), "DATABASES.STATE_DB.id"),
            (&SINGLE.replace("\"id\": 6", "\"id\": 4"), "index 4 is CONFIG_DB's too"),
            (
                &SINGLE
                    .replace(r#""id": 2, "separator": ":", "instance": "redis""#, r#""id": 2, "instance": "redis9""#),
                "\"redis9\" is not in INSTANCES",
            ),
            (
                &SINGLE.replace(r#""unix_socket_path": "/var/run/redis/redis.sock","#, "").replace("6379", "0"),
                "INSTANCES.redis: neither",
            ),
            (&SINGLE.replace("/var/run/redis/redis.sock", "run/redis.sock"), "an absolute path"),
            (&SINGLE.replace("/var/run/redis/redis.sock", "/var/run/u%20a/redis.sock"), "without `%`"),
            (
                &SINGLE
                    .replace(r#""unix_socket_path": "/var/run/redis/redis.sock","#, "")
                    .replace("127.0.0.1", "no such host"),
                "not a host",
            ),
        ];
        for (text, said) in cases {
            let e = parse(text, &ALL).unwrap_err();
            assert!(e.contains(said), "{e}");
        }
        // A database the command does not use may be missing.
        let no_asic = SINGLE.replace("\"ASIC_DB\"", "\"ASIC\"");
        assert_eq!(parse(&no_asic, &["--config-db", "--state-db"]).unwrap().dbs, DbIndices::default());
    }
}
