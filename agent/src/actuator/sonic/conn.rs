//! Connections to the switch's Redis: one URL, one database index per SONiC database, and
//! another URL for a database on another instance (SONiC's multi-database layout).

use redis::{Client, Connection, IntoConnectionInfo};
use std::time::Duration;

/// Where the switch's Redis is and how long to wait for it.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    url: String,
    info: redis::ConnectionInfo,
    timeout: Duration,
    /// Databases on another instance: index, URL (password masked), where to connect.
    elsewhere: Vec<(i64, String, redis::ConnectionInfo)>,
    /// The `--database-config` map that placed the databases, as messages show it (`None`:
    /// `--redis` and the index flags).
    map: Option<String>,
}

impl RedisTarget {
    /// Parse `redis://[user:password@]host[:port]` or `unix:///path/to/redis.sock`. The URL's own
    /// database number is ignored: every SONiC database has its index (`--config-db` ...).
    /// `password`, from `--redis-password-file`, is refused beside one in the URL.
    pub fn parse(url: &str, timeout: Duration, password: Option<&str>) -> Result<RedisTarget, String> {
        let (url, info) = connection_info(url, password)?;
        Ok(RedisTarget { url, info, timeout, elsewhere: Vec::new(), map: None })
    }

    /// The same, with database `db` on the instance at `url` (with the same password).
    pub fn with_database_at(mut self, db: i64, url: &str, password: Option<&str>) -> Result<RedisTarget, String> {
        let (url, info) = connection_info(url, password)?;
        self.elsewhere.retain(|(d, _, _)| *d != db);
        self.elsewhere.push((db, url, info));
        Ok(self)
    }

    /// The same, placed by the `--database-config` map at `map` (for messages).
    pub fn placed_by(mut self, map: Option<&std::path::Path>) -> RedisTarget {
        self.map = map.map(|p| p.display().to_string());
        self
    }

    /// How a message names the instance that holds database `db`, as the user gave it:
    /// `--redis URL`, or the `--database-config` map and the instance's URL.
    pub fn named(&self, db: i64) -> String {
        match &self.map {
            None => format!("--redis {}", self.url_of(db)),
            Some(map) => format!("--database-config {map} (Redis at {})", self.url_of(db)),
        }
    }

    /// How a message names what gave database `db` its index, as the user gave it: the flag
    /// (`--config-db 4`), or the map's entry (`DATABASES.CONFIG_DB.id 4`).
    pub fn index_named(&self, flag: &str, db: i64) -> String {
        match &self.map {
            None => format!("{flag} {db}"),
            Some(map) => format!("--database-config {map}: DATABASES.{}.id {db}", super::schema::db_name(flag)),
        }
    }

    /// The URL as given, password masked, for messages and logs.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL of the instance that holds database `db`, password masked.
    pub fn url_of(&self, db: i64) -> &str {
        self.instance_of(db).0
    }

    fn instance_of(&self, db: i64) -> (&str, &redis::ConnectionInfo) {
        match self.elsewhere.iter().find(|(d, _, _)| *d == db) {
            Some((_, url, info)) => (url, info),
            None => (&self.url, &self.info),
        }
    }

    /// A connection to database `db`, with read/write timeouts, named `name` in `CLIENT LIST`
    /// (so that an operator can see what ecn-tuner holds open).
    pub fn connect(&self, db: i64, name: &str) -> Result<Connection, String> {
        let (url, info) = self.instance_of(db);
        let mut info = info.clone();
        info.redis.db = db;
        let client = Client::open(info).map_err(|e| format!("Redis at {url}: {e}"))?;
        let mut con = client
            .get_connection_with_timeout(self.timeout)
            .map_err(|e| format!("cannot reach Redis at {url} (db {db}): {}", said(&e)))?;
        con.set_read_timeout(Some(self.timeout)).map_err(|e| format!("Redis at {url}: {e}"))?;
        con.set_write_timeout(Some(self.timeout)).map_err(|e| format!("Redis at {url}: {e}"))?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(name)
            .query::<()>(&mut con)
            .map_err(|e| format!("Redis at {url} (db {db}): {}", said(&e)))?;
        Ok(con)
    }
}

/// `url` as a connection, with `password` (from `--redis-password-file`) refused beside one in
/// the URL; and the URL with its password masked.
fn connection_info(url: &str, password: Option<&str>) -> Result<(String, redis::ConnectionInfo), String> {
    let shown = redact_password(url);
    let mut info = url
        .into_connection_info()
        .map_err(|e| format!("--redis {shown}: not a Redis URL ({e}); expected redis://HOST[:PORT] or unix:///PATH"))?;
    if let Some(password) = password {
        if info.redis.password.is_some() {
            return Err(format!("--redis-password-file: --redis {shown} has a password already; give it in one place"));
        }
        info.redis.password = Some(password.to_string());
    }
    Ok((shown, info))
}

/// A Redis error in words. redis-rs says a timeout as the socket's error ("Resource
/// temporarily unavailable (os error 11)"), and a connection Redis closed (`maxclients`
/// reached, `CLIENT KILL`) as "unexpected end of file": both are said for what they are.
pub fn said(e: &redis::RedisError) -> String {
    if e.is_timeout() {
        format!("no reply within --redis-timeout ({e})")
    } else if e.is_connection_dropped() {
        format!("Redis closed the connection (maxclients reached? the connection killed?): {e}")
    } else {
        e.to_string()
    }
}

/// `redis://user:secret@host` → `redis://user:***@host`, and `unix:///sock?pass=secret` →
/// `unix:///sock?pass=***`: messages and logs never show a password. A URL is read as redis-rs
/// reads it (its password, and the query fields it takes one from, `pass` or `password`, keys
/// percent-decoded); one it cannot read has everything from the user info's `:` to the last
/// `@` masked (a password may hold `/`, `?` or `@`), and a `pass` or `password` field.
pub fn redact_password(url: &str) -> String {
    let secret = |key: &str| key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password");
    if let Some(mut parsed) = redis::parse_redis_url(url) {
        if parsed.password().is_some() && parsed.set_password(Some("***")).is_err() {
            return masked_by_text(url, &secret);
        }
        if parsed.query_pairs().any(|(k, _)| secret(&k)) {
            let pairs: Vec<(String, String)> = parsed
                .query_pairs()
                .map(|(k, v)| {
                    let v = if secret(&k) { "***".to_string() } else { v.into_owned() };
                    (k.into_owned(), v)
                })
                .collect();
            parsed.query_pairs_mut().clear().extend_pairs(pairs);
        }
        return parsed.to_string();
    }
    masked_by_text(url, &secret)
}

/// [`redact_password`] for a URL that does not parse.
fn masked_by_text(url: &str, secret: &dyn Fn(&str) -> bool) -> String {
    // `unix:/path` too.
    let start = url.find("://").map(|i| i + 3).or_else(|| url.find(':').map(|i| i + 1)).unwrap_or(0);
    let (head, rest) = match url[start..].rfind('@').map(|at| start + at) {
        Some(at) => match url[start..at].find(':') {
            Some(colon) => (format!("{}***", &url[..start + colon + 1]), &url[at..]),
            None => (url[..at].to_string(), &url[at..]),
        },
        None => (url[..start].to_string(), &url[start..]),
    };
    let Some((before, query)) = rest.split_once('?') else { return format!("{head}{rest}") };
    let fields: Vec<String> = query
        .split('&')
        .map(|field| match field.split_once('=') {
            Some((k, _)) if secret(k) => format!("{k}=***"),
            _ => field.to_string(),
        })
        .collect();
    format!("{head}{before}?{}", fields.join("&"))
}

/// This connection's id on the server (`CLIENT ID`, Redis 5.0 and newer): what
/// [`fence_client`] needs to fence it off later.
pub fn client_id(con: &mut Connection) -> redis::RedisResult<i64> {
    redis::cmd("CLIENT").arg("ID").query(con)
}

/// The names a running actuator's connections bear in `CLIENT LIST`: its CONFIG_DB writer
/// (opened at the first write or drift check), its COUNTERS_DB poller, and the poller's
/// CONFIG_DB connection that reads the counter groups' status, which is open from the first
/// poll on even while telemetry is withheld.
pub const ACTUATOR_CONNECTIONS: [&str; 3] = ["ecn-tuner-config", "ecn-tuner-counters", COUNTER_GROUPS_CONNECTION];

/// The name of the poller's CONFIG_DB connection (counter groups' `FLEX_COUNTER_STATUS`).
pub const COUNTER_GROUPS_CONNECTION: &str = "ecn-tuner-counter-groups";

/// Another running actuator on this Redis, as `CLIENT LIST` shows one of its connections
/// (`client id N from ADDR (NAME)`); `None` if there is none. A process that dies closes its
/// sockets, so only a live actuator (or one cut off by the network) shows.
pub fn running_actuator(con: &mut Connection) -> redis::RedisResult<Option<String>> {
    let own = client_id(con)?.to_string();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con)?;
    Ok(list.lines().find_map(|line| {
        let name = client_field(line, "name")?;
        let id = client_field(line, "id")?;
        (ACTUATOR_CONNECTIONS.contains(&name) && id != own)
            .then(|| format!("client id {id} from {} ({name})", client_field(line, "addr").unwrap_or("?")))
    }))
}

/// [`running_actuator`] on every instance that holds one of `dbs` (an actuator's connections
/// may all be on CONFIG_DB's and COUNTERS_DB's instances, and STATE_DB on a third), each looked
/// at once, through a connection named `name`.
pub fn running_actuator_at(target: &RedisTarget, dbs: &[i64], name: &str) -> Result<Option<String>, String> {
    let mut seen: Vec<&str> = Vec::new();
    for &db in dbs {
        let url = target.url_of(db);
        if seen.contains(&url) {
            continue;
        }
        seen.push(url);
        let mut con = target.connect(db, name)?;
        let found = running_actuator(&mut con).map_err(|e| format!("Redis at {url}: CLIENT LIST: {}", said(&e)))?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// Close the server side of client `id` (`CLIENT KILL ID`), if it is still connected; returns
/// how many connections were closed (0 or 1). Redis runs one command at a time, so once this
/// returns nothing more that client sent can run: a transaction of its either ran before or
/// never will.
fn kill_client(con: &mut Connection, id: i64) -> redis::RedisResult<i64> {
    redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query(con)
}

/// What [`fence_client`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fenced {
    /// Our old connection was still open and is closed now.
    Killed,
    /// No client has that id any more: the connection is closed already.
    Gone,
    /// The id names a connection that is not ours (this one, or one with another name): Redis
    /// restarted, which closed ours, and numbers its clients from 1 again.
    NotOurs {
        /// The other connection's name (`CLIENT SETNAME`), empty if it has none.
        name: String,
    },
}

/// Close our earlier connection `stale_id`, named `name`, at the server, so that nothing it
/// sent can run any more; `con` is a new connection of ours whose own id is `own_id`. Client
/// ids are unique only while the server runs: after a restart `stale_id` may be another
/// program's connection (a SONiC daemon's), so it is closed only if `CLIENT LIST` shows it still
/// has our name. Between that check and the kill the id cannot change hands: that would take
/// another restart, which would break `con` first.
pub fn fence_client(con: &mut Connection, own_id: i64, stale_id: i64, name: &str) -> redis::RedisResult<Fenced> {
    if own_id == stale_id {
        return Ok(Fenced::NotOurs { name: name.to_string() });
    }
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con)?;
    let wanted = stale_id.to_string();
    let Some(entry) = list.lines().find(|l| client_field(l, "id") == Some(wanted.as_str())) else {
        return Ok(Fenced::Gone);
    };
    let theirs = client_field(entry, "name").unwrap_or("");
    if theirs != name {
        return Ok(Fenced::NotOurs { name: theirs.to_string() });
    }
    Ok(match kill_client(con, stale_id)? {
        0 => Fenced::Gone,
        _ => Fenced::Killed,
    })
}

/// A `key=value` field of one `CLIENT LIST` line.
fn client_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ').find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
}

/// Check, once at start-up, that this Redis and user allow what fencing needs (`CLIENT ID`,
/// `CLIENT LIST` and `CLIENT KILL ID`): open a connection and close it from another. `Ok(Err(why))`
/// when Redis refuses (an old server, an ACL), `Err` when it cannot be reached.
pub fn can_fence(target: &RedisTarget, db: i64) -> Result<Result<(), String>, String> {
    const NAME: &str = "ecn-tuner-fence-check";
    let mut victim = target.connect(db, NAME)?;
    let mut killer = target.connect(db, NAME)?;
    let killed = client_id(&mut victim).and_then(|victim_id| {
        let own = client_id(&mut killer)?;
        fence_client(&mut killer, own, victim_id, NAME)
    });
    Ok(match killed {
        Ok(Fenced::Killed) => Ok(()),
        Ok(other) => Err(format!("fencing off a test connection did not close it ({other:?})")),
        Err(e) => Err(e.to_string()),
    })
}

/// Whether the Redis user may run what every write needs (`WATCH`, `UNWATCH`, `MULTI`,
/// `EXEC`), tried with an empty transaction: without `MULTI`, Redis runs each command of a
/// write on its own as it comes, and every write then left a part behind. `Err`: the
/// connection failed.
pub fn can_transact(target: &RedisTarget, db: i64) -> Result<Result<(), String>, String> {
    let mut con = target.connect(db, "ecn-tuner-discover")?;
    let tried = redis::cmd("WATCH")
        .arg("ecn-tuner:transaction-check")
        .query::<()>(&mut con)
        .and_then(|()| redis::cmd("UNWATCH").query::<()>(&mut con))
        .and_then(|()| redis::cmd("MULTI").query::<()>(&mut con))
        .and_then(|()| redis::cmd("EXEC").query::<()>(&mut con));
    Ok(tried.map_err(|e| e.to_string()))
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

/// The keys of `keys` that hold a hash, or none (gone since they were listed), in their order.
/// A key of another type (a string or a list someone wrote under a table's name) is said once a
/// key and left out: reading it failed with a bare `WRONGTYPE`, and with it every read of its
/// table (the start, every write, the revert of an unconfirmed change) for a key ecn-tuner
/// never uses.
pub fn hashes_among(con: &mut Connection, keys: &[String]) -> redis::RedisResult<Vec<String>> {
    Ok(typed(con, keys)?.0)
}

/// [`hashes_among`], and the keys of another type, left out.
fn typed(con: &mut Connection, keys: &[String]) -> redis::RedisResult<(Vec<String>, Vec<String>)> {
    if keys.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut types = redis::pipe();
    for k in keys {
        types.cmd("TYPE").arg(k);
    }
    let types: Vec<String> = query_pipeline(&types, con)?;
    let mut hashes = Vec::with_capacity(keys.len());
    let mut others = Vec::new();
    for (k, t) in keys.iter().zip(&types) {
        if t == "hash" || t == "none" {
            hashes.push(k.clone());
        } else {
            read_as_absent(k, &format!("a {t}, not a hash as every entry of its table is"));
            others.push(k.clone());
        }
    }
    Ok((hashes, others))
}

/// Says once a key that it is read as absent, and why.
pub(super) fn read_as_absent(key: &str, why: &str) {
    warn_once(key, &format!("{why}: read as absent"));
}

/// Warns of `what` at `key` once per process, however often the key is read so (start-up reads
/// some keys twice).
pub(super) fn warn_once(key: &str, what: &str) {
    static SAID: std::sync::Mutex<std::collections::BTreeSet<(String, String)>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    if SAID.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert((key.to_string(), what.to_string())) {
        tracing::warn!(key = %key, "{what}");
    }
}

/// `HGETALL` of the hashes among `keys` ([`hashes_among`]) in two round trips: each key with its
/// fields in Redis's order, and the keys among `keys` that hold another type than a hash. A
/// hash holding bytes that are not UTF-8 reads as absent too, said once (it failed the whole
/// read, naming no key).
pub fn hgetall_typed(con: &mut Connection, keys: &[String]) -> redis::RedisResult<(HashEntries, Vec<String>)> {
    // A key that changed type between its TYPE and its HGETALL failed the whole read, and the
    // write or revert it was for, with a bare WRONGTYPE: read once more (every reply of the
    // failed read came in), when TYPE says what it is now.
    match hashes_read(con, keys) {
        Err(e) if e.code() == Some("WRONGTYPE") => hashes_read(con, keys),
        read => read,
    }
}

/// Hashes as read: each key with its fields.
pub type HashEntries = Vec<(String, super::schema::Fields)>;

/// [`hgetall_typed`]'s read.
fn hashes_read(con: &mut Connection, keys: &[String]) -> redis::RedisResult<(HashEntries, Vec<String>)> {
    let (hashes, others) = typed(con, keys)?;
    if hashes.is_empty() {
        return Ok((Vec::new(), others));
    }
    let mut pipe = redis::pipe();
    for k in &hashes {
        pipe.cmd("HGETALL").arg(k);
    }
    let raw: Vec<Vec<(Vec<u8>, Vec<u8>)>> = query_pipeline(&pipe, con)?;
    let text = |fields: Vec<(Vec<u8>, Vec<u8>)>| -> Option<super::schema::Fields> {
        fields.into_iter().map(|(f, v)| Some((String::from_utf8(f).ok()?, String::from_utf8(v).ok()?))).collect()
    };
    let entries = hashes
        .into_iter()
        .zip(raw)
        .filter_map(|(k, fields)| match text(fields) {
            Some(fields) => Some((k, fields)),
            None => {
                read_as_absent(&k, "holds bytes that are not UTF-8");
                None
            }
        })
        .collect();
    Ok((entries, others))
}

/// Run `pipe` on `con`, asking Redis first whether it answers at all ([`probe`]), and giving up
/// at the first reply that does not come. redis-rs reads every reply of a pipeline, each
/// within `--redis-timeout`, whatever became of the ones before, so a Redis that stopped
/// answering (a stopped process, a host gone quiet) held a pipeline of a hundred commands for
/// a hundred timeouts (the poller, and so the actuator's shutdown, for five minutes; a write
/// of 24 queues, and so every actuator call waiting on it, for 50). The probe finds a Redis
/// that stopped before the pipeline; [`FailFast`] one that stops in the middle.
///
/// After an error, replies may still be on their way: the caller must drop `con` (every
/// caller does, and a failed transaction's connection is also fenced off).
pub fn query_pipeline<T: redis::FromRedisValue>(pipe: &redis::Pipeline, con: &mut Connection) -> redis::RedisResult<T> {
    probe(con)?;
    pipe.query(&mut FailFast(con))
}

/// Ask Redis whether it answers at all. `ECHO`, not `PING`: a Redis whose snapshot failed to
/// save (`MISCONF`: stop-writes-on-bgsave-error, a full disk) refuses `PING` with every write,
/// but serves reads, and telemetry and the read-backs stopped while it could be read.
pub fn probe(con: &mut Connection) -> redis::RedisResult<()> {
    redis::cmd("ECHO").arg("ecn-tuner").query(con)
}

/// Send `pipe` as one MULTI … EXEC transaction (after [`probe`]: the caller asks that first)
/// and return every reply as Redis sent it, errors among them: MULTI's, one per command as it
/// was queued, and EXEC's (nil when a watched key changed, else one reply per command). An
/// error inside EXEC is one command's: Redis runs the others. redis-rs made the first such
/// error the whole transaction's, which read as "nothing ran" while the rest had. Fails,
/// like [`query_pipeline`], at the first reply that does not come.
pub fn transaction_replies(pipe: &redis::Pipeline, con: &mut Connection) -> redis::RedisResult<Vec<redis::Value>> {
    let mut atomic = pipe.clone();
    atomic.atomic();
    redis::ConnectionLike::req_packed_commands(&mut FailFast(con), &atomic.get_packed_pipeline(), 0, pipe.len() + 2)
}

/// A connection that reads a pipeline's replies as redis-rs does (a server's error reply
/// is a reply like any other; the caller sorts them), but stops at the first that cannot be
/// read (a timeout, a closed socket) instead of waiting out one timeout for each reply left.
struct FailFast<'a>(&'a mut Connection);

impl redis::ConnectionLike for FailFast<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        self.0.send_packed_command(cmd)?;
        let mut replies = Vec::with_capacity(count);
        let mut first_error = None;
        let mut expected = offset + count;
        let mut read = 0;
        while read < expected {
            match self.0.recv_response()? {
                // RESP3 may put push messages between replies: they answer no command.
                redis::Value::Push { .. } => expected += 1,
                // Before `offset` come a transaction's MULTI and QUEUED replies: an error there
                // (a command refused while queued) fails the whole pipeline, as in redis-rs.
                redis::Value::ServerError(e) if read < offset => {
                    first_error.get_or_insert(e.into());
                }
                reply if read >= offset => replies.push(reply),
                _ => {}
            }
            read += 1;
        }
        first_error.map_or(Ok(replies), Err)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.0.check_connection()
    }

    fn is_open(&self) -> bool {
        self.0.is_open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact_password("redis://tuner:s3cr@t@10.0.0.1:6379/4"), "redis://tuner:***@10.0.0.1:6379/4");
        assert_eq!(redact_password("redis://:pw@host"), "redis://:***@host");
        assert_eq!(redact_password("redis://user@host"), "redis://user@host");
        assert_eq!(redact_password("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact_password("unix:///var/run/redis/redis.sock"), "unix:///var/run/redis/redis.sock");
        // A password holding '/', '?' or '@'; one in a socket URL's query.
        assert_eq!(redact_password("redis://:pa/ss@host/3"), "redis://:***@host/3");
        assert_eq!(redact_password("redis://u:p?w@d@host"), "redis://u:***@host");
        assert_eq!(redact_password("unix:///run/redis.sock?db=4&pass=hunter2"), "unix:///run/redis.sock?db=4&pass=***");
        assert_eq!(
            redact_password("redis+unix:///run/redis.sock?user=u&password=hunter2"),
            "redis+unix:///run/redis.sock?user=u&password=***"
        );
        assert_eq!(redact_password("unix:/run/redis.sock?pass=x"), "unix:/run/redis.sock?pass=***");
        // A key redis-rs decodes; user info in a socket URL; an '@' in a query is no user info.
        assert!(!redact_password("unix:///s?pa%73s=hunter2").contains("hunter2"));
        assert!(!redact_password("unix://:hunter2@localhost/run/redis.sock").contains("hunter2"));
        assert_eq!(redact_password("redis://127.0.0.1:1/0?x=a@b"), "redis://127.0.0.1:1/0?x=a@b");
        let t = RedisTarget::parse("redis://tuner:hunter2@127.0.0.1:1", Duration::from_secs(1), None).unwrap();
        assert!(!t.url().contains("hunter2"));
    }

    /// A server that answers every command with `+OK`, the probe (`ECHO`) too, after which it
    /// reads on and answers nothing more: a Redis stopped in the middle of a pipeline (a real
    /// one cannot be stopped between two replies on cue). Returns its port.
    fn quiet_after_probe() -> u16 {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut out = stream.try_clone().unwrap();
            let mut lines = BufReader::new(stream).lines();
            let mut quiet = false;
            // Each command is an array of bulk strings: `*N`, then N pairs of `$len` and data.
            while let Some(Ok(head)) = lines.next() {
                let n: usize = head.trim_start_matches('*').parse().unwrap_or(0);
                let args: Vec<String> = (0..2 * n).filter_map(|_| lines.next()?.ok()).skip(1).step_by(2).collect();
                if quiet {
                    continue;
                }
                out.write_all(b"+OK\r\n").unwrap();
                quiet = args.first().is_some_and(|a| a.eq_ignore_ascii_case("ECHO"));
            }
        });
        port
    }

    /// A pipeline whose Redis stops answering after the probe fails at the first reply that
    /// does not come: redis-rs waited out a timeout for each of its replies (20 × 300 ms
    /// here; a write of 24 queues' profiles and bindings, 50 timeouts).
    #[test]
    fn a_pipeline_gives_up_at_the_first_reply_that_does_not_come() {
        let client = Client::open(format!("redis://127.0.0.1:{}", quiet_after_probe())).unwrap();
        let mut con = client.get_connection_with_timeout(Duration::from_secs(10)).unwrap();
        let timeout = Duration::from_millis(300);
        con.set_read_timeout(Some(timeout)).unwrap();
        let mut pipe = redis::pipe();
        for i in 0..20 {
            pipe.cmd("HGETALL").arg(format!("QUEUE|Ethernet{i}|3"));
        }
        let started = std::time::Instant::now();
        let r: redis::RedisResult<Vec<Vec<(String, String)>>> = query_pipeline(&pipe, &mut con);
        let took = started.elapsed();
        assert!(r.as_ref().is_err_and(|e| e.is_timeout()), "{r:?}");
        assert!(took < timeout * 5, "{took:?}: more than one timeout");
    }

    #[test]
    fn client_list_fields_are_read_whole() {
        let line = "id=12 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=8 name=ecn-tuner-config age=3 db=4";
        assert_eq!(client_field(line, "id"), Some("12"));
        assert_eq!(client_field(line, "name"), Some("ecn-tuner-config"));
        assert_eq!(client_field(line, "addr"), Some("127.0.0.1:5000"));
        assert_eq!(client_field("id=12 name= age=3", "name"), Some(""));
        assert_eq!(client_field(line, "nam"), None);
    }
}
