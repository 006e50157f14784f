//! The cluster as memproxy sees it: which master serves each slot ([`Topology`], from
//! `CLUSTER SLOTS`), where each command's keys are (from `COMMAND`), and memproxy's own
//! connection to ask (the upstream URL's credentials). Shared by every client; refreshed when a
//! node answers `MOVED`, when a node is lost, and at most every [`MIN_REFRESH`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use redis::Value;

use super::slot::SLOTS;
use crate::error::{MemError, MemResult};
use crate::resp::read as v;
use crate::upstream::{Link, UpstreamAddr};

/// Shortest time between two slot-map refreshes (a burst of MOVED replies causes one).
pub const MIN_REFRESH: Duration = Duration::from_millis(200);

/// A master: `host:port`, as the cluster announces it.
pub type NodeAddr = String;

/// Which master serves each slot.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    /// The masters that serve at least one slot, in the order of their first slot.
    pub masters: Vec<NodeAddr>,
    /// Slot → index into `masters`, or `u16::MAX` when no master serves it.
    slots: Vec<u16>,
}

impl Topology {
    /// From a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, …], replicas…], …]`. An
    /// empty host means the host of the node that answered (`asked`), as a node that never met
    /// another one announces itself.
    pub fn parse(reply: &Value, asked: &str) -> Result<Topology, String> {
        let mut t = Topology {
            masters: Vec::new(),
            slots: vec![u16::MAX; SLOTS],
        };
        for range in v::array(reply) {
            let r = v::array(range);
            let (Some(start), Some(end), Some(master)) = (
                r.first().and_then(v::int),
                r.get(1).and_then(v::int),
                r.get(2),
            ) else {
                return Err("unreadable CLUSTER SLOTS reply".into());
            };
            let m = v::array(master);
            let mut host = m.first().and_then(v::text).unwrap_or_default();
            if host.is_empty() {
                host = asked.to_string();
            }
            let port = m.get(1).and_then(v::int).unwrap_or(0);
            if host.is_empty() || host == "?" || port <= 0 {
                continue;
            }
            let addr = format!("{host}:{port}");
            let idx = match t.masters.iter().position(|a| *a == addr) {
                Some(i) => i,
                None => {
                    t.masters.push(addr);
                    t.masters.len() - 1
                }
            };
            let (start, end) = (
                start.clamp(0, SLOTS as i64 - 1),
                end.clamp(0, SLOTS as i64 - 1),
            );
            for s in start..=end {
                t.slots[s as usize] = idx as u16;
            }
        }
        if t.masters.is_empty() {
            return Err("the cluster serves no slot (CLUSTER SLOTS is empty)".into());
        }
        Ok(t)
    }

    /// The master serving `slot`, if any.
    pub fn master_of(&self, slot: u16) -> Option<&NodeAddr> {
        let i = *self.slots.get(slot as usize)?;
        self.masters.get(i as usize)
    }
}

/// Where a command's keys are, as `COMMAND` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    pub first: i64,
    pub last: i64,
    pub step: i64,
    /// Keys that only the server can find (`COMMAND GETKEYS`): EVAL, ZUNIONSTORE, XREAD, …
    pub movable: bool,
}

/// A Redis Cluster behind memproxy.
pub struct Cluster {
    seed: UpstreamAddr,
    map: RwLock<Arc<Topology>>,
    refreshed: Mutex<Option<Instant>>,
    refreshing: tokio::sync::Mutex<()>,
    /// Read once at start (`COMMAND`); read without a lock on every request.
    commands: OnceLock<HashMap<String, KeySpec>>,
    /// memproxy's own connection (to any master), for CLUSTER SLOTS and COMMAND GETKEYS.
    admin: tokio::sync::Mutex<Option<(Link, String)>>,
    timeout: Duration,
}

impl Cluster {
    /// Learn the slot map and the command table from the upstream node.
    pub async fn connect(seed: UpstreamAddr, timeout: Duration) -> MemResult<Cluster> {
        let c = Cluster {
            seed,
            map: RwLock::new(Arc::new(Topology::default())),
            refreshed: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            commands: OnceLock::new(),
            admin: tokio::sync::Mutex::new(None),
            timeout,
        };
        c.refresh().await?;
        let table = c.admin(vec![b"COMMAND".to_vec()]).await?;
        let mut commands = HashMap::new();
        for entry in v::array(&table) {
            add_command(&mut commands, entry);
        }
        let _ = c.commands.set(commands);
        Ok(c)
    }

    /// The current slot map.
    pub fn topology(&self) -> Arc<Topology> {
        self.map.read().expect("map lock").clone()
    }

    /// How to reach `node` (the upstream URL's TLS settings; no credentials: clients bring their
    /// own).
    pub fn addr_of(&self, node: &str) -> UpstreamAddr {
        let (host, port) = node.rsplit_once(':').unwrap_or((node, "6379"));
        self.seed.at(host, port.parse().unwrap_or(6379))
    }

    /// Where `name`'s keys are (lower-case name, or `name|subcommand`).
    pub fn key_spec(&self, name: &str) -> Option<KeySpec> {
        self.commands.get()?.get(name).copied()
    }

    /// The keys of a command whose keys only the server can find.
    pub async fn get_keys<A: AsRef<[u8]>>(&self, args: &[A]) -> MemResult<Vec<Vec<u8>>> {
        let mut cmd = vec![b"COMMAND".to_vec(), b"GETKEYS".to_vec()];
        cmd.extend(args.iter().map(|a| a.as_ref().to_vec()));
        let reply = self.admin(cmd).await?;
        if let Value::ServerError(_) = reply {
            return Ok(Vec::new());
        }
        Ok(v::array(&reply)
            .iter()
            .filter_map(|k| match k {
                Value::BulkString(b) => Some(b.clone()),
                Value::SimpleString(s) => Some(s.clone().into_bytes()),
                _ => None,
            })
            .collect())
    }

    /// Read the slot map again, unless it was read within [`MIN_REFRESH`].
    pub async fn refresh(&self) -> MemResult<()> {
        let since = Instant::now();
        let _one = self.refreshing.lock().await;
        if let Some(at) = *self.refreshed.lock().expect("refresh lock") {
            if at >= since || at.elapsed() < MIN_REFRESH {
                return Ok(());
            }
        }
        let (reply, asked) = self
            .admin_at(vec![b"CLUSTER".to_vec(), b"SLOTS".to_vec()])
            .await?;
        let topology =
            Topology::parse(&crate::error::ok(reply)?, &asked).map_err(MemError::upstream)?;
        tracing::debug!(masters = ?topology.masters, "slot map read");
        *self.map.write().expect("map lock") = Arc::new(topology);
        *self.refreshed.lock().expect("refresh lock") = Some(Instant::now());
        Ok(())
    }

    /// One command on memproxy's own connection: to the node it last used, else any master of
    /// the map, else the configured node.
    async fn admin(&self, cmd: Vec<Vec<u8>>) -> MemResult<Value> {
        Ok(self.admin_at(cmd).await?.0)
    }

    /// [`Cluster::admin`], and the host of the node that answered.
    async fn admin_at(&self, cmd: Vec<Vec<u8>>) -> MemResult<(Value, String)> {
        let mut guard = self.admin.lock().await;
        if let Some((link, host)) = guard.as_mut() {
            match link.call1(cmd.clone()).await {
                Ok(v) if link.broken.is_none() && link.owed == 0 => return Ok((v, host.clone())),
                _ => *guard = None,
            }
        }
        let mut last = MemError::upstream("no cluster node reachable");
        let mut candidates: Vec<UpstreamAddr> = self
            .topology()
            .masters
            .iter()
            .map(|m| self.addr_of(m))
            .collect();
        candidates.push(self.seed.clone());
        for addr in candidates {
            match addr.admin(self.timeout).await {
                Ok(mut link) => match link.call1(cmd.clone()).await {
                    Ok(v) => {
                        let host = addr.host().unwrap_or_default();
                        *guard = Some((link, host.clone()));
                        return Ok((v, host));
                    }
                    Err(e) => last = e,
                },
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// One `COMMAND` entry (and its subcommands, as `name|sub`) into the table.
fn add_command(table: &mut HashMap<String, KeySpec>, entry: &Value) {
    let e = v::array(entry);
    let Some(name) = e.first().and_then(v::text) else {
        return;
    };
    let flags: Vec<String> = e
        .get(2)
        .map(|f| v::array(f).iter().filter_map(v::text).collect())
        .unwrap_or_default();
    let spec = KeySpec {
        first: e.get(3).and_then(v::int).unwrap_or(0),
        last: e.get(4).and_then(v::int).unwrap_or(0),
        step: e.get(5).and_then(v::int).unwrap_or(0),
        movable: flags.iter().any(|f| f == "movablekeys"),
    };
    table.insert(name.to_ascii_lowercase(), spec);
    if let Some(subs) = e.get(9) {
        for s in v::array(subs) {
            add_command(table, s);
        }
    }
}
