//! Connections to the switch's Redis: one URL, one database index per SONiC database.

use redis::{Client, Connection, IntoConnectionInfo};
use std::time::Duration;

/// Where the switch's Redis is and how long to wait for it.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    url: String,
    info: redis::ConnectionInfo,
    timeout: Duration,
}

impl RedisTarget {
    /// Parse `redis://[user:password@]host[:port]` or `unix:///path/to/redis.sock`. The URL's own
    /// database number is ignored: every SONiC database has its index (`--config-db` ...).
    pub fn parse(url: &str, timeout: Duration) -> Result<RedisTarget, String> {
        let info = url.into_connection_info().map_err(|e| {
            format!("--redis {url}: not a Redis URL ({e}); expected redis://HOST[:PORT] or unix:///PATH")
        })?;
        Ok(RedisTarget { url: url.to_string(), info, timeout })
    }

    /// The URL as given, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A connection to database `db`, with read/write timeouts, named `name` in `CLIENT LIST`
    /// (so that an operator can see what ecn-tuner holds open).
    pub fn connect(&self, db: i64, name: &str) -> Result<Connection, String> {
        let mut info = self.info.clone();
        info.redis.db = db;
        let client = Client::open(info).map_err(|e| format!("Redis at {}: {e}", self.url))?;
        let mut con = client
            .get_connection_with_timeout(self.timeout)
            .map_err(|e| format!("cannot reach Redis at {} (db {db}): {e}", self.url))?;
        con.set_read_timeout(Some(self.timeout)).map_err(|e| format!("Redis at {}: {e}", self.url))?;
        con.set_write_timeout(Some(self.timeout)).map_err(|e| format!("Redis at {}: {e}", self.url))?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(name)
            .query::<()>(&mut con)
            .map_err(|e| format!("Redis at {} (db {db}): {e}", self.url))?;
        Ok(con)
    }
}

/// This connection's id on the server (`CLIENT ID`, Redis 5.0 and newer): what
/// [`kill_client`] needs to fence it off later.
pub fn client_id(con: &mut Connection) -> redis::RedisResult<i64> {
    redis::cmd("CLIENT").arg("ID").query(con)
}

/// Close the server side of client `id` (`CLIENT KILL ID`), if it is still connected. Redis runs
/// one command at a time, so once this returns nothing more that client sent can run: a
/// transaction of its either ran before or never will.
pub fn kill_client(con: &mut Connection, id: i64) -> redis::RedisResult<()> {
    let _killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query(con)?;
    Ok(())
}

/// Every key matching `pattern` (`SCAN`, so that a large database is not blocked), sorted.
pub fn scan_keys(con: &mut Connection, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) =
            redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000).query(con)?;
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}

/// `HGETALL` of many keys in one round trip; fields in Redis's order.
pub fn hgetall_many(con: &mut Connection, keys: &[String]) -> redis::RedisResult<Vec<Vec<(String, String)>>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for k in keys {
        pipe.cmd("HGETALL").arg(k);
    }
    pipe.query(con)
}
