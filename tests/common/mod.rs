//! Test support: a real redis-server with RedisJSON and RediSearch on a free port, and memproxy
//! in-process on port 0. One Redis and one proxy per test binary (tests isolate themselves by
//! using their own users, namespaces, threads and key names); tests that need another setting
//! start their own. Missing dependencies fail loudly with the setup command: nothing is skipped.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use memproxy::Config;

pub fn deps() -> PathBuf {
    let cfg = Config::default();
    let d = cfg.deps_dir();
    for f in [
        "bin/redis-server",
        "lib/rejson.so",
        "lib/redisearch.so",
        "lib/libonnxruntime.so",
        "model/all-MiniLM-L6-v2/model.onnx",
    ] {
        assert!(
            d.join(f).exists(),
            "missing {} — run scripts/setup.sh first (or scripts/test.sh, which does)",
            d.join(f).display()
        );
    }
    d
}

/// Path of a test data file (`tests/data`, see its README for where each came from).
pub fn data(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    assert!(p.exists(), "test data {} not found", p.display());
    p
}

/// Rows of a test data TSV file (comment lines skipped), split at tabs.
pub fn tsv(name: &str) -> Vec<Vec<String>> {
    std::fs::read_to_string(data(name))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server this test process owns; killed on drop and when the process dies. Its
/// directory goes with it on drop.
pub struct Redis {
    pub port: u16,
    child: Option<Child>,
    dir: Option<PathBuf>,
}

impl Redis {
    /// Start on a free port with both modules and the extra arguments.
    pub fn start(extra: &[&str]) -> Redis {
        Redis::start_with(true, extra)
    }

    /// Start on a free port, with or without RedisJSON and RediSearch.
    pub fn start_with(modules: bool, extra: &[&str]) -> Redis {
        Redis::launch(free_port(), modules, extra, true)
    }

    /// Start with both modules on a given port (to stand in for a restarted server).
    pub fn start_on(port: u16, extra: &[&str]) -> Redis {
        Redis::launch(port, true, extra, false)
    }

    fn launch(port: u16, modules: bool, extra: &[&str], may_move: bool) -> Redis {
        // A port found free may be taken by another test's server before ours binds it: then ours
        // exits, and the one answering is not ours. Check the pid; retry (on another port when
        // the caller did not ask for this one).
        let password = extra
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| extra.get(i + 1))
            .map(|p| p.to_string());
        let mut port = port;
        for _ in 0..5 {
            let mut r = Redis::spawn(port, modules, extra);
            if r.wait_ready(password.as_deref()) {
                return r;
            }
            r.kill();
            if may_move {
                port = free_port();
            } else {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        panic!("redis-server did not start (last port {port})")
    }

    fn spawn(port: u16, modules: bool, extra: &[&str]) -> Redis {
        let d = deps();
        // Each server in a directory of its own, emptied first: a replica's full sync makes its
        // primary write dump.rdb, and a cluster node writes nodes.conf, which a later server on
        // the same port (another test's) would load: its slots "already busy".
        let dir =
            std::env::temp_dir().join(format!("memproxy-test-redis-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new(d.join("bin/redis-server"));
        cmd.args([
            "--dir",
            dir.to_str().unwrap(),
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if modules {
            cmd.arg("--loadmodule")
                .arg(d.join("lib/rejson.so"))
                .arg("--loadmodule")
                .arg(d.join("lib/redisearch.so"));
        }
        // Die with the test process (the spawning thread lives as long as the process).
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = spawn_from_keeper(cmd);
        Redis {
            port,
            child: Some(child),
            dir: Some(dir),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A Redis Sentinel (the same binary, `--sentinel`) on a free port, monitoring `master` at
    /// 127.0.0.1:`primary` with quorum 2, quick to act: down after 1 s, failover timeout 3 s.
    pub fn sentinel(master: &str, primary: u16) -> Redis {
        Redis::sentinel_with(master, primary, "")
    }

    /// [`Redis::sentinel`] with more lines for its sentinel.conf (`requirepass …`).
    pub fn sentinel_with(master: &str, primary: u16, conf: &str) -> Redis {
        for _ in 0..5 {
            if let Some(r) = Redis::try_sentinel(free_port(), master, primary, conf) {
                return r;
            }
        }
        panic!("redis-server --sentinel did not start")
    }

    /// [`Redis::sentinel`] on a given port.
    pub fn sentinel_on(port: u16, master: &str, primary: u16) -> Redis {
        Redis::try_sentinel(port, master, primary, "")
            .expect("redis-server --sentinel did not start")
    }

    fn try_sentinel(port: u16, master: &str, primary: u16, conf_extra: &str) -> Option<Redis> {
        {
            let dir = std::env::temp_dir().join(format!(
                "memproxy-test-sentinel-{}-{port}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let conf = dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor {master} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {master} 1000\nsentinel failover-timeout {master} 3000\n\
                     sentinel parallel-syncs {master} 1\n{conf_extra}\n",
                    dir.display()
                ),
            )
            .unwrap();
            let mut cmd = Command::new(deps().join("bin/redis-server"));
            cmd.arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let mut r = Redis {
                port,
                child: Some(spawn_from_keeper(cmd)),
                dir: Some(dir.clone()),
            };
            let password = conf_extra
                .lines()
                .find_map(|l| l.strip_prefix("requirepass "))
                .map(str::trim);
            if r.wait_ready(password) {
                return Some(r);
            }
            r.kill();
        }
        None
    }

    /// Wait until *this* server (checked by pid) answers; false if it exited or never answered.
    fn wait_ready(&mut self, password: Option<&str>) -> bool {
        let pid = self.child.as_ref().map(|c| c.id()).unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(_)) = c.try_wait() {
                    return false;
                }
            }
            if let Ok(s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut r = BufReader::new(s);
                let mut req = Vec::new();
                if let Some(p) = password {
                    req.extend(encode(&[b"AUTH", p.as_bytes()]));
                }
                req.extend(encode(&[b"INFO", b"server"]));
                let _ = r.get_mut().write_all(&req);
                let mut line = String::new();
                while r.read_line(&mut line).unwrap_or(0) > 0 {
                    if let Some(p) = line.strip_prefix("process_id:") {
                        return p.trim().parse::<u32>().ok() == Some(pid);
                    }
                    if line.starts_with('-') && !line.starts_with("-LOADING") {
                        break;
                    }
                    line.clear();
                }
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A Redis Cluster the test owns: `masters` masters with both modules, the slots split evenly,
/// on free ports whose bus ports (port + 10000) are free too; made with CLUSTER ADDSLOTSRANGE
/// and CLUSTER MEET (no redis-cli needed).
pub struct ClusterNodes {
    pub nodes: Vec<Redis>,
    pub masters: usize,
}

impl ClusterNodes {
    pub fn start(masters: usize) -> ClusterNodes {
        ClusterNodes::start_with_replicas(masters, 0)
    }

    /// `masters` masters, each with `replicas` replicas (nodes `masters..` in order: replica j of
    /// master i is node `masters + i * replicas + j`).
    pub fn start_with_replicas(masters: usize, replicas: usize) -> ClusterNodes {
        let mut nodes = Vec::new();
        while nodes.len() < masters * (1 + replicas) {
            let port = free_port();
            if port > 55535 || TcpListener::bind(("127.0.0.1", port + 10000)).is_err() {
                continue;
            }
            nodes.push(Redis::start_on(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-require-full-coverage",
                    "no",
                    // DEBUG's server knobs are tested through memproxy (a local connection).
                    "--enable-debug-command",
                    "local",
                ],
            ));
        }
        let per = 16384 / masters;
        for (i, n) in nodes.iter().take(masters).enumerate() {
            let (a, b) = (
                i * per,
                if i + 1 == masters {
                    16383
                } else {
                    (i + 1) * per - 1
                },
            );
            let mut c = direct(n);
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(a)
                .arg(b)
                .query(&mut c)
                .unwrap();
        }
        for n in &nodes[1..] {
            let mut c = direct(n);
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(nodes[0].port)
                .query(&mut c)
                .unwrap();
        }
        let cl = ClusterNodes { nodes, masters };
        cl.wait_agreed(masters);
        for i in 0..masters {
            let id = cl.id(i);
            for j in 0..replicas {
                let r = &cl.nodes[masters + i * replicas + j];
                eventually("the replica knows its master", || {
                    let mut c = direct(r);
                    redis::cmd("CLUSTER")
                        .arg("REPLICATE")
                        .arg(&id)
                        .query::<()>(&mut c)
                        .is_ok()
                });
            }
        }
        if replicas > 0 {
            eventually("the replicas are in sync", || {
                cl.nodes[masters..].iter().all(|r| {
                    let mut c = direct(r);
                    let info: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut c)
                        .unwrap_or_default();
                    info.contains("master_link_status:up")
                })
            });
        }
        cl
    }

    /// Node `i`'s cluster id.
    pub fn id(&self, i: usize) -> String {
        node_id(&self.nodes[i])
    }

    /// Until every node says the cluster is ok and knows every master.
    pub fn wait_agreed(&self, masters: usize) {
        eventually("the cluster agrees", || {
            self.nodes.iter().all(|n| {
                let mut c = direct(n);
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut c)
                    .unwrap_or_default();
                let slots: redis::Value = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query(&mut c)
                    .unwrap_or(redis::Value::Nil);
                info.contains("cluster_state:ok") && items(&slots).len() >= masters
            })
        });
    }

    /// `key`'s hash slot, as the cluster computes it.
    pub fn keyslot(&self, key: &str) -> i64 {
        let mut c = direct(&self.nodes[0]);
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut c)
            .unwrap()
    }

    /// Start moving `slot` from `from` to `to` as `redis-cli --cluster reshard` does: IMPORTING
    /// on the target, MIGRATING on the source. Then [`ClusterNodes::migrate_keys`] and
    /// [`ClusterNodes::end_move`].
    pub fn begin_move(&self, slot: i64, from: &Redis, to: &Redis) {
        set_slot(to, slot, "IMPORTING", &node_id(from));
        set_slot(from, slot, "MIGRATING", &node_id(to));
    }

    /// Every key of `slot` from `from` to `to` by MIGRATE, `batch` at a time, `pause` after each.
    pub fn migrate_keys(&self, slot: i64, from: &Redis, to: &Redis, batch: usize, pause: Duration) {
        let mut d = direct(from);
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(batch)
                .query(&mut d)
                .unwrap();
            if keys.is_empty() {
                return;
            }
            self.migrate(from, to, &keys);
            std::thread::sleep(pause);
        }
    }

    /// `keys` from `from` to `to` by one MIGRATE (their slot being moved).
    pub fn migrate(&self, from: &Redis, to: &Redis, keys: &[String]) {
        let _: () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to.port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(keys)
            .query(&mut direct(from))
            .unwrap();
    }

    /// Every node is told `to` serves `slot`.
    pub fn end_move(&self, slot: i64, to: &Redis) {
        let id = node_id(to);
        for n in &self.nodes {
            set_slot(n, slot, "NODE", &id);
        }
    }

    /// The node that serves `key`'s slot.
    pub fn owner(&self, key: &str) -> &Redis {
        let mut c = direct(&self.nodes[0]);
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut c)
            .unwrap();
        let masters = self.masters;
        let per = 16384 / masters as i64;
        let i = ((slot / per) as usize).min(masters - 1);
        &self.nodes[i]
    }
}

/// memproxy as a process of its own on `port` in front of `upstream` (for tests that signal or
/// kill it), its output discarded.
pub fn spawn_memproxy(port: u16, upstream: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_memproxy"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--upstream",
            upstream,
            "--log",
            "warn",
        ])
        .env("MEMPROXY_DEPS", deps())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Run the binary with `args`; (success, stdout, stderr).
pub fn memproxy(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_memproxy"));
    c.args(args)
        .env("MEMPROXY_DEPS", deps())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    {
        let mut i = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            i.write_all(s.as_bytes()).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A cluster node's id.
pub fn node_id(node: &Redis) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut direct(node))
        .unwrap()
}

/// CLUSTER SETSLOT `slot` `how` `id` on `node`.
fn set_slot(node: &Redis, slot: i64, how: &str, id: &str) {
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(how)
        .arg(id)
        .query(&mut direct(node))
        .unwrap();
}

/// Spawn children from one thread that never exits, so PR_SET_PDEATHSIG fires only when the
/// whole test process goes.
fn spawn_from_keeper(cmd: Command) -> Child {
    type Req = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);
    static KEEPER: OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Req>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Req>();
        std::thread::spawn(move || {
            for (mut cmd, reply) in rx {
                let _ = reply.send(cmd.spawn());
            }
            loop {
                std::thread::park();
            }
        });
        std::sync::Mutex::new(tx)
    });
    let (tx, rx) = std::sync::mpsc::channel();
    keeper.lock().unwrap().send((cmd, tx)).unwrap();
    rx.recv().unwrap().expect("spawn redis-server")
}

/// A memproxy running in-process on its own runtime thread.
pub struct Proxy {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Proxy {
    pub fn start(upstream: &str, tune: impl FnOnce(&mut Config)) -> Proxy {
        deps();
        let mut cfg = Config {
            listen: "127.0.0.1:0".into(),
            upstream: upstream.into(),
            log: "warn".into(),
            ..Config::default()
        };
        tune(&mut cfg);
        cfg.validate().expect("valid test config");
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let tx = ready_tx.clone();
            let result = rt.block_on(memproxy::run(
                cfg,
                async {
                    let _ = stop_rx.await;
                },
                move |bound| {
                    let addr = match bound {
                        memproxy::proxy::server::Bound::Tcp(a) => a,
                        memproxy::proxy::server::Bound::Unix(_) => "0.0.0.0:0".parse().unwrap(),
                    };
                    let _ = tx.send(Ok(addr));
                },
            ));
            if let Err(e) = result {
                let _ = ready_tx.send(Err(format!("{e:#}")));
            }
        });
        let addr = ready_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("proxy start timed out")
            .expect("proxy start");
        Proxy {
            addr,
            stop: Some(stop_tx),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// A redis-crate client connection through the proxy.
    pub fn client(&self) -> redis::Connection {
        let c = redis::Client::open(self.url()).unwrap();
        let con = c
            .get_connection_with_timeout(Duration::from_secs(10))
            .unwrap();
        con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        con
    }

    pub fn raw(&self) -> Raw {
        Raw::connect(self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// The Redis and proxy shared by all tests of one binary.
pub struct Shared {
    pub redis: Redis,
    pub proxy: Proxy,
}

pub fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let redis = Redis::start(&[]);
        let proxy = Proxy::start(&redis.url(), |c| c.max_text_bytes = 256 * 1024);
        Shared { redis, proxy }
    })
}

/// A unique name for this test's users, namespaces, threads and keys.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A raw RESP connection: write bytes, read whole replies.
pub struct Raw {
    pub stream: BufReader<TcpStream>,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.set_nodelay(true).unwrap();
        Raw {
            stream: BufReader::new(s),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.get_mut().write_all(bytes).unwrap();
    }

    /// Send one command as a multibulk.
    pub fn cmd(&mut self, args: &[&[u8]]) {
        self.send(&encode(args));
    }

    /// Read one complete reply, returned as its raw bytes.
    pub fn read(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.read_into(&mut out);
        out
    }

    fn read_into(&mut self, out: &mut Vec<u8>) {
        let mut line = Vec::new();
        self.stream.read_until(b'\n', &mut line).unwrap();
        assert!(
            !line.is_empty(),
            "connection closed while a reply was expected"
        );
        out.extend_from_slice(&line);
        let head = String::from_utf8_lossy(&line[1..line.len() - 2]).to_string();
        match line[0] {
            b'$' | b'=' | b'!' => {
                let n: i64 = head.parse().unwrap();
                if n >= 0 {
                    let mut body = vec![0u8; n as usize + 2];
                    self.stream.read_exact(&mut body).unwrap();
                    out.extend_from_slice(&body);
                }
            }
            b'*' | b'~' | b'>' => {
                let n: i64 = head.parse().unwrap();
                for _ in 0..n.max(0) {
                    self.read_into(out);
                }
            }
            b'%' | b'|' => {
                let n: i64 = head.parse().unwrap();
                for _ in 0..2 * n {
                    self.read_into(out);
                }
                if line[0] == b'|' {
                    self.read_into(out);
                }
            }
            _ => {}
        }
    }

    /// Read a reply and return it as text.
    pub fn read_str(&mut self) -> String {
        String::from_utf8_lossy(&self.read()).into_owned()
    }

    /// True if the peer closed the connection (reads EOF within the timeout).
    pub fn closed(&mut self) -> bool {
        let mut buf = [0u8; 1];
        matches!(self.stream.read(&mut buf), Ok(0) | Err(_))
    }
}

pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// A direct connection to Redis (bypassing the proxy).
pub fn direct(redis: &Redis) -> redis::Connection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// How many times Redis ran `command` (as `INFO commandstats` names it, e.g. `json.set`;
/// commands run by scripts count too) since start or `CONFIG RESETSTAT`.
pub fn command_calls(d: &mut redis::Connection, command: &str) -> i64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(d).unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// Field `name` of a map reply (RESP2 flat array or RESP3 map).
pub fn get<'a>(v: &'a redis::Value, name: &str) -> &'a redis::Value {
    use redis::Value;
    match v {
        Value::Map(m) => m
            .iter()
            .find(|(k, _)| as_str(k) == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no field {name} in {v:?}")),
        Value::Array(a) => a
            .chunks(2)
            .find(|p| as_str(&p[0]) == name)
            .map(|p| &p[1])
            .unwrap_or_else(|| panic!("no field {name} in {v:?}")),
        other => panic!("not a map: {other:?}"),
    }
}

pub fn as_str(v: &redis::Value) -> String {
    use redis::Value;
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Double(d) => d.to_string(),
        Value::Okay => "OK".into(),
        Value::Nil => "(nil)".into(),
        other => format!("{other:?}"),
    }
}

pub fn as_f64(v: &redis::Value) -> f64 {
    as_str(v)
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {v:?}"))
}

pub fn as_i64(v: &redis::Value) -> i64 {
    as_str(v)
        .parse()
        .unwrap_or_else(|_| panic!("not an integer: {v:?}"))
}

pub fn items(v: &redis::Value) -> &[redis::Value] {
    match v {
        redis::Value::Array(a) => a,
        other => panic!("not an array: {other:?}"),
    }
}

/// Run a command, expecting an error; returns its text (code and message).
pub fn err(con: &mut redis::Connection, args: &[&str]) -> String {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    match c.query::<redis::Value>(con) {
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
            .trim()
            .to_string(),
        Ok(redis::Value::ServerError(e)) => format!("{} {}", e.code(), e.details().unwrap_or("")),
        Ok(v) => panic!("expected an error from {args:?}, got {v:?}"),
    }
}

/// Run a command through the redis crate and return the raw value.
pub fn q(con: &mut redis::Connection, args: &[&str]) -> redis::Value {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Poll until `f` is true (no fixed sleeps).
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Planted memories (other writers' documents in the guide's layout), for consolidation and
/// export tests.
pub const DIM: usize = 384;

/// A deterministic unit vector.
pub fn random_unit(seed: u64) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    let mut v: Vec<f32> = (0..DIM)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32
        })
        .collect();
    let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.iter_mut().for_each(|a| *a /= n);
    v
}

/// `v` nudged by a little noise (cosine distance about 0.005).
pub fn near(v: &[f32], seed: u64) -> Vec<f32> {
    let noise = random_unit(seed ^ 0xdead_beef);
    let mut w: Vec<f32> = v.iter().zip(&noise).map(|(a, b)| a + 0.1 * b).collect();
    let n = w.iter().map(|a| a * a).sum::<f32>().sqrt();
    w.iter_mut().for_each(|a| *a /= n);
    w
}

#[allow(clippy::too_many_arguments)]
pub fn plant_cmd(
    id: &str,
    user: &str,
    ns: &str,
    kind: &str,
    v: &[f32],
    created: f64,
    hits: i64,
) -> redis::Cmd {
    let doc = serde_json::json!({
        "id": id, "user": user, "namespace": ns, "kind": kind, "source_thread": "",
        "text": format!("planted memory {id}"), "embedding": v, "created_ts": created, "hit_count": hits,
    });
    let mut c = redis::cmd("JSON.SET");
    c.arg(format!("agent:mem:{id}"))
        .arg("$")
        .arg(doc.to_string());
    c
}

/// Wait until RediSearch has indexed every planted document.
pub fn wait_indexed(d: &mut redis::Connection) {
    eventually("the index to catch up", || {
        let info: redis::Value = redis::cmd("FT.INFO").arg("agentmem:idx").query(d).unwrap();
        let pct = as_str(get(&info, "percent_indexed"));
        pct == "1" || pct == "1.0"
    });
}

/// One HTTP/1.1 request to `base` (`http://host:port` or `host:port`): (status, body; a chunked
/// body's JSON line).
pub fn http(base: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    http_as(base, method, path, "application/json", body)
}

/// [`http`] with a body of another content type (`application/x-www-form-urlencoded`).
pub fn http_as(
    base: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, String) {
    let addr = base.trim_start_matches("http://");
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    let body = body
        .lines()
        .find(|l| l.starts_with('{') || l.starts_with('['))
        .unwrap_or(body)
        .to_string();
    (status, body)
}

/// The FT.CREATE arguments of the redis.io agent-memory guide's index: `name` over JSON documents
/// under `prefix`, its fields and 384-float HNSW cosine vectors, scope tags without CASESENSITIVE.
pub fn guide_index(name: &str, prefix: &str) -> Vec<String> {
    let mut a: Vec<String> = [name, "ON", "JSON", "PREFIX", "1", prefix, "SCHEMA"]
        .map(String::from)
        .to_vec();
    for (field, kind) in [
        ("text", "TEXT"),
        ("user", "TAG"),
        ("namespace", "TAG"),
        ("kind", "TAG"),
        ("source_thread", "TAG"),
        ("created_ts", "NUMERIC SORTABLE"),
        ("hit_count", "NUMERIC SORTABLE"),
        (
            "embedding",
            "VECTOR HNSW 6 TYPE FLOAT32 DIM 384 DISTANCE_METRIC COSINE",
        ),
    ] {
        a.extend([format!("$.{field}"), "AS".into(), field.into()]);
        a.extend(kind.split(' ').map(String::from));
    }
    a
}

/// SIGTERM while a request is in flight (a BLPOP that times out after 500 ms) on a memproxy of
/// its own in front of `upstream`: the reply and the one queued behind it still come, then the
/// process exits 0 and accepts no more (the same through single and cluster sessions).
pub fn sigterm_finishes_in_flight_replies(upstream: &str) {
    let port = free_port();
    let mut child = spawn_memproxy(port, upstream);
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "memproxy did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = Raw::connect(SocketAddr::from(([127, 0, 0, 1], port)));
    c.send(b"PING\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
    // A request in flight when the signal comes: Redis answers it after 500 ms.
    let key = unique("sigterm");
    c.send(
        &[
            encode(&[b"BLPOP", key.as_bytes(), b"0.5"]),
            encode(&[b"PING"]),
        ]
        .concat(),
    );
    std::thread::sleep(Duration::from_millis(100));
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    // Sent after the signal: not read, so not run (issue 37: the cluster session kept serving
    // what a client sent while it drained).
    std::thread::sleep(Duration::from_millis(100));
    c.cmd(&[b"ECHO", b"sent-after-sigterm"]);
    assert_eq!(c.read_str(), "*-1\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
    assert!(c.closed(), "a request sent after SIGTERM was answered");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "no longer accepting"
    );
}

/// A request Redis's reader would refuse gets Redis's own protocol error, after the replies of the
/// requests before it, and the connection closes: the same through single and cluster sessions
/// (issue 37: cluster mode answered with memproxy's own words).
pub fn malformed_requests_are_refused_as_redis_does(proxy: &Proxy) {
    let mut c = proxy.raw();
    c.send(b"*1\r\n$4\r\nPING\r\n*1\r\nx\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
    let r = c.read_str();
    assert!(r.starts_with("-ERR Protocol error: expected '$'"), "{r}");
    assert!(c.closed());
    let mut c = proxy.raw();
    c.send(b"*1\r\n$2000000000\r\n");
    let r = c.read_str();
    assert!(
        r.starts_with("-ERR Protocol error: invalid bulk length"),
        "{r}"
    );
    assert!(c.closed());
    // Redis's suite ("Protocol desync regression test"): a client that keeps writing after the
    // bytes Redis refuses still reads Redis's error once its writes fail (cluster mode dropped it
    // when the master stopped reading and the client's side ended first).
    for start in [&b"\x00"[..], b"*\x00", b"$\x00"] {
        let mut c = proxy.raw();
        c.send(start);
        let payload = [b'A'; 1024];
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.stream.get_mut().write_all(&payload).is_ok() {
            assert!(Instant::now() < deadline, "the connection was never closed");
        }
        let mut line = String::new();
        let _ = c.stream.read_line(&mut line);
        assert!(line.contains("Protocol error"), "{start:?}: {line:?}");
    }
}

// --- One behaviour suite: run from the same code against a single Redis (tests/passthrough.rs)
// --- and a 3-master cluster (tests/cluster.rs); what differs is a documented cluster rule.

/// The bounds [`bounds_refuse_one_client`] expects: 1 MiB a request, 1,000 arguments.
pub fn bounded(c: &mut Config) {
    c.max_request_bytes = 1 << 20;
    c.max_request_args = 1000;
}

/// A request over the byte or argument bound (a proxy started with [`bounded`]) is refused in
/// the same words, its client closed; others go on.
pub fn bounds_refuse_one_client(proxy: &Proxy) {
    let mut other = proxy.raw();
    other.cmd(&[b"PING"]);
    assert_eq!(other.read_str(), "+PONG\r\n");
    let mut big = proxy.raw();
    // Refused as soon as the header announces more than the bound (before the payload comes).
    big.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5000000\r\nxxxx");
    assert_eq!(
        big.read_str(),
        "-ERR Protocol error: request of more than 1048576 bytes (max_request_bytes)\r\n"
    );
    assert!(big.closed());
    let mut many = proxy.raw();
    many.send(b"*5000\r\n$3\r\nDEL\r\n");
    assert_eq!(
        many.read_str(),
        "-ERR Protocol error: request has 5000 arguments, over the proxy's limit of 1000 (max_request_args)\r\n"
    );
    assert!(many.closed());
    other.cmd(&[b"PING"]);
    assert_eq!(other.read_str(), "+PONG\r\n");
}

/// Inline and multibulk requests, empty lines and `*0` (no reply).
pub fn inline_and_multibulk_requests(proxy: &Proxy) {
    let mut c = proxy.raw();
    c.send(b"PING\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
    c.send(b"set inline-k \"a b\"\r\n");
    assert_eq!(c.read_str(), "+OK\r\n");
    c.cmd(&[b"GET", b"inline-k"]);
    assert_eq!(c.read_str(), "$3\r\na b\r\n");
    // Empty inline lines and *0 get no reply; the next command's reply comes next.
    c.send(b"\r\n\n*0\r\nMEM.PING\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
}

/// Ten thousand requests in one write, answered in order.
pub fn pipeline_of_ten_thousand(proxy: &Proxy) {
    let mut c = proxy.raw();
    let key = unique("pipe");
    let mut burst = Vec::new();
    for i in 0..10_000 {
        burst.extend(encode(&[
            b"RPUSH",
            key.as_bytes(),
            i.to_string().as_bytes(),
        ]));
    }
    c.send(&burst);
    for i in 0..10_000 {
        assert_eq!(c.read_str(), format!(":{}\r\n", i + 1));
    }
}

/// Ordinary and MEM.* requests in one pipeline: one reply each, in request order.
pub fn mixed_pipeline_in_order(proxy: &Proxy) {
    let mut c = proxy.raw();
    let key = unique("mixed");
    let mut burst = encode(&[b"SET", key.as_bytes(), b"v1"]);
    burst.extend(encode(&[b"MEM.PING"]));
    burst.extend(encode(&[b"GET", key.as_bytes()]));
    burst.extend(encode(&[b"mem.ping"]));
    burst.extend(encode(&[b"MEM.NOPE", b"a"]));
    burst.extend(encode(&[b"GET", key.as_bytes()]));
    c.send(&burst);
    assert_eq!(c.read_str(), "+OK\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
    assert_eq!(c.read_str(), "$2\r\nv1\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
    assert_eq!(
        c.read_str(),
        "-ERR unknown command 'MEM.NOPE', with args beginning with: 'a' \r\n"
    );
    assert_eq!(c.read_str(), "$2\r\nv1\r\n");
}

/// MEM.* writes and reads pipelined in one write (embedded ahead of their turn): each applied
/// in request order, so a recall right after a remember in the pipeline finds it, and a bad
/// request in the middle is answered in its place without disturbing the others.
pub fn pipelined_mem_verbs_apply_in_order(proxy: &Proxy) {
    let mut con = proxy.client();
    let users: Vec<String> = (0..6).map(|i| unique(&format!("pipe{i}"))).collect();
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for (i, user) in users.iter().enumerate() {
        let text = format!("Pipelined note {i}: the user keeps {i} cats named after rivers.");
        pipe.cmd("MEM.REMEMBER").arg(&text).arg("USER").arg(user);
        if i == 2 {
            pipe.cmd("MEM.REMEMBER")
                .arg("x")
                .arg("USER")
                .arg(user)
                .arg("K");
        }
        pipe.cmd("MEM.RECALL").arg(&text).arg("USER").arg(user);
        pipe.arg("MODE").arg("vector").arg("THRESHOLD").arg("2");
    }
    let replies: Vec<redis::Value> = pipe.query(&mut con).expect("pipeline");
    assert_eq!(replies.len(), 13);
    let mut at = 0;
    for (i, _) in users.iter().enumerate() {
        assert!(
            !matches!(replies[at], redis::Value::ServerError(_)),
            "remember {i}: {:?}",
            replies[at]
        );
        at += 1;
        if i == 2 {
            assert!(
                matches!(replies[at], redis::Value::ServerError(_)),
                "the bad request answers an error in its place: {:?}",
                replies[at]
            );
            at += 1;
        }
        let recall = format!("{:?}", replies[at]);
        assert!(
            recall.contains(&format!("Pipelined note {i}:")),
            "recall {i} finds the memory remembered just before it: {recall}"
        );
        for j in (0..6).filter(|j| *j != i) {
            assert!(
                !recall.contains(&format!("Pipelined note {j}:")),
                "{recall}"
            );
        }
        at += 1;
    }
}

/// Redis closing a client's idle connection (CLIENT KILL USER on every Redis) closes the client
/// at once, with nothing owed: in single mode as the upstream's end, in cluster mode now too (the
/// session reads its masters while the client is idle; it found out at the next request before).
pub fn an_idle_connection_closed_by_redis_closes_the_client(
    proxy: &Proxy,
    on_every: impl Fn(&[&str]),
) {
    let user = unique("killed");
    on_every(&["ACL", "SETUSER", &user, "on", ">pw", "~*", "&*", "+@all"]);
    let mut c = proxy.raw();
    c.cmd(&[b"AUTH", user.as_bytes(), b"pw"]);
    assert_eq!(c.read_str(), "+OK\r\n");
    for i in 0..8 {
        let k = unique(&format!("idle{i}"));
        c.cmd(&[b"GET", k.as_bytes()]);
        assert_eq!(c.read_str(), "$-1\r\n");
    }
    on_every(&["CLIENT", "KILL", "USER", &user]);
    c.stream
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 64];
    let r = c.stream.read(&mut buf);
    assert!(matches!(r, Ok(0)), "closed with nothing owed: {r:?}");
}

/// A MULTI that Redis refuses (here NOPERM) opens no transaction: MEM.* still run, plain
/// commands run at once, EXEC is Redis's "without MULTI" (single mode had assumed the
/// transaction open until an EXEC or DISCARD).
pub fn a_refused_multi_opens_no_transaction(proxy: &Proxy, on_every: impl Fn(&[&str])) {
    let user = unique("nomulti");
    on_every(&[
        "ACL", "SETUSER", &user, "on", ">pw", "~*", "&*", "+@all", "-multi",
    ]);
    let key = unique("nomulti-key");
    let mut c = proxy.raw();
    c.cmd(&[b"AUTH", user.as_bytes(), b"pw"]);
    assert_eq!(c.read_str(), "+OK\r\n");
    c.cmd(&[b"MULTI"]);
    let r = c.read_str();
    assert!(r.starts_with("-NOPERM"), "{r}");
    c.cmd(&[b"MEM.PING"]);
    assert_eq!(c.read_str(), "+PONG\r\n");
    c.cmd(&[b"SET", key.as_bytes(), b"v"]);
    assert_eq!(c.read_str(), "+OK\r\n");
    c.cmd(&[b"EXEC"]);
    assert_eq!(c.read_str(), "-ERR EXEC without MULTI\r\n");
    c.cmd(&[b"GET", key.as_bytes()]);
    assert_eq!(c.read_str(), "$1\r\nv\r\n");
    // The same in one write: what follows the MULTI is read as Redis reads it, outside a
    // transaction (single mode classified it before the refusal came back).
    let mut burst = encode(&[b"MULTI"]);
    for args in [
        &[&b"MEM.PING"[..]][..],
        &[b"CLIENT", b"REPLY", b"SKIP"],
        &[b"ECHO", b"skipped"],
        &[b"ECHO", b"answered"],
        &[b"MEM.PING"],
        &[b"EXEC"],
    ] {
        burst.extend(encode(args));
    }
    c.send(&burst);
    let r = c.read_str();
    assert!(r.starts_with("-NOPERM"), "{r}");
    assert_eq!(c.read_str(), "+PONG\r\n");
    assert_eq!(c.read_str(), "$8\r\nanswered\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
    assert_eq!(c.read_str(), "-ERR EXEC without MULTI\r\n");
}

/// CLIENT REPLY is checked by Redis, in its words: a user without `client|reply` is refused
/// OFF and SKIP (NOPERM, one reply) and its replies stay on — single mode expected no reply to
/// them and hung the connection on the refusal, cluster mode applied them without asking.
pub fn client_reply_is_checked_by_redis(proxy: &Proxy, on_every: impl Fn(&[&str])) {
    let user = unique("noreply");
    on_every(&[
        "ACL",
        "SETUSER",
        &user,
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-client|reply",
    ]);
    let mut c = proxy.raw();
    c.cmd(&[b"AUTH", user.as_bytes(), b"pw"]);
    assert_eq!(c.read_str(), "+OK\r\n");
    for mode in [&b"OFF"[..], b"SKIP", b"ON"] {
        let mut burst = encode(&[b"CLIENT", b"REPLY", mode]);
        burst.extend(encode(&[b"ECHO", mode]));
        burst.extend(encode(&[b"MEM.PING"]));
        c.send(&burst);
        let r = c.read_str();
        assert!(r.starts_with("-NOPERM"), "{r}");
        assert_eq!(
            c.read(),
            [
                b"$",
                mode.len().to_string().as_bytes(),
                b"\r\n",
                mode,
                b"\r\n"
            ]
            .concat()
        );
        assert_eq!(c.read_str(), "+PONG\r\n");
    }
    c.cmd(&[b"CLIENT", b"REPLY"]);
    let r = c.read_str();
    assert!(r.starts_with("-ERR wrong number of arguments"), "{r}");
    c.cmd(&[b"CLIENT", b"REPLY", b"maybe"]);
    let r = c.read_str();
    assert!(r.starts_with("-NOPERM"), "{r}");
    let mut d = proxy.raw();
    d.cmd(&[b"CLIENT", b"REPLY", b"maybe"]);
    assert_eq!(d.read_str(), "-ERR syntax error\r\n");
    d.cmd(&[b"PING"]);
    assert_eq!(d.read_str(), "+PONG\r\n");
}

/// Inside MULTI, CLIENT REPLY OFF|SKIP (with which Redis cuts EXEC's own reply short) and the
/// (un)subscribe commands (answered beside EXEC's reply) are refused with one line and the
/// transaction goes on; refused while replies are off, they reach Redis neither (a MEM.* sent on
/// would have aborted the transaction). Found by a differential run against Redis itself.
pub fn commands_memproxy_cannot_follow_inside_multi(proxy: &Proxy) {
    let key = unique("multi-refused");
    let mut c = proxy.raw();
    let mut burst = encode(&[b"MULTI"]);
    for r in [
        &[&b"CLIENT"[..], b"REPLY", b"OFF"][..],
        &[b"UNSUBSCRIBE", b"a", b"b"],
        &[b"SUBSCRIBE", b"a"],
        &[b"CLIENT", b"REPLY", b"ON"],
        &[b"SET", key.as_bytes(), b"v"],
        &[b"EXEC"],
        &[b"GET", key.as_bytes()],
    ] {
        burst.extend(encode(r));
    }
    c.send(&burst);
    assert_eq!(c.read_str(), "+OK\r\n");
    for what in ["CLIENT REPLY OFF", "UNSUBSCRIBE", "SUBSCRIBE"] {
        assert_eq!(
            c.read_str(),
            format!("-ERR {what} inside MULTI is not supported by memproxy (the transaction is unaffected)\r\n")
        );
    }
    assert_eq!(c.read_str(), "+QUEUED\r\n");
    assert_eq!(c.read_str(), "+QUEUED\r\n");
    assert_eq!(c.read_str(), "*2\r\n+OK\r\n+OK\r\n");
    assert_eq!(c.read_str(), "$1\r\nv\r\n");
    // Replies off: nothing is answered, and the refused requests stay out of the transaction.
    let mut burst = encode(&[b"CLIENT", b"REPLY", b"OFF"]);
    for r in [
        &[&b"MULTI"[..]][..],
        &[b"SET", key.as_bytes(), b"w"],
        &[b"MEM.PING"],
        &[b"UNSUBSCRIBE"],
        &[b"EXEC"],
        &[b"CLIENT", b"REPLY", b"ON"],
        &[b"GET", key.as_bytes()],
    ] {
        burst.extend(encode(r));
    }
    c.send(&burst);
    assert_eq!(c.read_str(), "+OK\r\n");
    assert_eq!(c.read_str(), "$1\r\nw\r\n");
    // CLIENT REPLY ON queued while replies are off would turn them on halfway through EXEC's
    // reply (Redis then sends its elements without the array's header): refused, silently;
    // the transaction runs, and replies stay off until an ON outside it.
    let mut burst = encode(&[b"CLIENT", b"REPLY", b"OFF"]);
    for r in [
        &[&b"MULTI"[..]][..],
        &[b"CLIENT", b"REPLY", b"ON"],
        &[b"SET", key.as_bytes(), b"x"],
        &[b"EXEC"],
        &[b"PING"],
        &[b"CLIENT", b"REPLY", b"ON"],
        &[b"GET", key.as_bytes()],
    ] {
        burst.extend(encode(r));
    }
    c.send(&burst);
    assert_eq!(c.read_str(), "+OK\r\n");
    assert_eq!(c.read_str(), "$1\r\nx\r\n");
}

/// CLIENT REPLY SKIP before a MEM.* the proxy answers alone (a malformed one): the SKIP is spent
/// on it, in Redis too — the next command is answered (single mode had left Redis's SKIP to
/// swallow it).
pub fn skip_is_spent_on_a_mem_answered_by_the_proxy(proxy: &Proxy) {
    let mut c = proxy.raw();
    let mut burst = encode(&[b"CLIENT", b"REPLY", b"SKIP"]);
    burst.extend(encode(&[b"MEM.RECALL"]));
    burst.extend(encode(&[b"PING"]));
    burst.extend(encode(&[b"ECHO", b"x"]));
    c.send(&burst);
    assert_eq!(c.read_str(), "+PONG\r\n");
    assert_eq!(c.read_str(), "$1\r\nx\r\n");
}

/// A differential run: `rounds` random pipelines of ordinary commands (transactions, WATCH,
/// CLIENT REPLY, UNSUBSCRIBE outside subscribed mode, errors) each in one write, answered by
/// `proxy` byte for byte as `reference` (a Redis reached directly) answers them. Left out: what
/// memproxy refuses inside MULTI (above). It found the refused-MULTI, CLIENT REPLY,
/// SKIP and UNSUBSCRIBE-in-MULTI differences fixed on 2026-12-07, and RESET inside a cluster
/// transaction (refused, failing the transaction; Redis runs it at once).
pub fn answers_as_redis_does(proxy: &Proxy, reference: &Redis, seed: u64, rounds: usize) {
    let mut next = draws(seed);
    let pool: &[&[&str]] = &[
        &["PING"],
        &["ECHO", "w"],
        &["SET", "K:a", "v"],
        &["GET", "K:a"],
        &["INCR", "K:n"],
        &["LPUSH", "K:l", "x"],
        &["LRANGE", "K:l", "0", "-1"],
        &["DEL", "K:a"],
        &["INCR", "K:a"],
        &["CLIENT", "REPLY", "ON"],
        &["CLIENT", "REPLY", "OFF"],
        &["CLIENT", "REPLY", "SKIP"],
        &["CLIENT", "REPLY", "bad"],
        &["MULTI"],
        &["EXEC"],
        &["DISCARD"],
        &["WATCH", "K:a"],
        &["UNWATCH"],
        &["UNSUBSCRIBE"],
        &["UNSUBSCRIBE", "a", "b"],
        &["PUNSUBSCRIBE"],
        &["GET"],
        &["FOO", "x"],
        &["SELECT", "0"],
        &["EXISTS", "K:a", "K:n"],
        &["MGET", "K:a", "K:n"],
        &["RESET"],
        &["BLPOP", "K:l", "0.01"],
        &["CLIENT", "SETNAME", "dfz"],
        &["CLIENT", "GETNAME"],
        &["PUBLISH", "K:ch", "m"],
        // HELLO's own reply differs (ids, "mode"): sent under CLIENT REPLY SKIP, outside MULTI.
        &["HELLO", "3"],
        &["HELLO", "2"],
        &["HGETALL", "K:h"],
        &["HSET", "K:h", "f", "v"],
    ];
    let reference = SocketAddr::from(([127, 0, 0, 1], reference.port));
    for round in 0..rounds {
        let cmds = random_pipeline(pool, &mut next, 14);
        let mut outs = Vec::new();
        for (side, addr) in [("p", proxy.addr), ("r", reference)] {
            let key = format!("{{dfz{side}{seed}-{round}}}");
            let got = answers_to(Raw::connect(addr), &burst_of(&cmds, &key), 1 << 20, &cmds);
            // Keys in replies (BLPOP's) are the side's own: named alike.
            outs.push(got.replace(&key, "{dfz}"));
        }
        assert_eq!(outs[0], outs[1], "seed {seed} round {round}: {cmds:?}");
    }
}

/// The differential runs' draws: `next(n)` is in `0..n`, the same sequence for the same seed
/// (xorshift).
fn draws(seed: u64) -> impl FnMut(usize) -> usize {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    }
}

/// One random pipeline of 1 to `most` commands from `pool`, less what memproxy refuses inside
/// MULTI (the (un)subscribe commands, CLIENT REPLY but ON while replies are on) and HELLO there;
/// a HELLO outside goes under CLIENT REPLY SKIP (its own reply differs: ids, "mode").
fn random_pipeline<'a>(
    pool: &[&'a [&'a str]],
    next: &mut impl FnMut(usize) -> usize,
    most: usize,
) -> Vec<&'a [&'a str]> {
    let mut cmds: Vec<&[&str]> = Vec::new();
    let (mut in_multi, mut off) = (false, false);
    for _ in 0..1 + next(most) {
        let c = pool[next(pool.len())];
        let queued_on = c == ["CLIENT", "REPLY", "ON"] && !off;
        let refused =
            (c.starts_with(&["CLIENT", "REPLY"]) && !queued_on) || c[0].ends_with("SUBSCRIBE");
        if in_multi && (refused || c[0] == "HELLO") {
            continue;
        }
        if c[0] == "HELLO" && !off {
            cmds.push(&["CLIENT", "REPLY", "SKIP"]);
        }
        match c {
            ["MULTI"] => in_multi = true,
            ["EXEC"] | ["DISCARD"] => in_multi = false,
            ["CLIENT", "REPLY", "OFF"] => off = true,
            ["CLIENT", "REPLY", "ON"] if !in_multi => off = false,
            ["RESET"] => (in_multi, off) = (false, false),
            _ => {}
        }
        cmds.push(c);
    }
    cmds
}

/// `cmds` in one write, `K:` naming keys under `key`, then DISCARD, CLIENT REPLY ON and an
/// `ECHO END` that marks the end of the answers.
fn burst_of(cmds: &[&[&str]], key: &str) -> Vec<u8> {
    let mut burst = Vec::new();
    for c in cmds {
        let args: Vec<String> = c
            .iter()
            .map(|a| a.replace("K:", &format!("{key}:")))
            .collect();
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        burst.extend(encode(&args));
    }
    burst.extend(encode(&[b"DISCARD"]));
    burst.extend(encode(&[b"CLIENT", b"REPLY", b"ON"]));
    burst.extend(encode(&[b"ECHO", b"END"]));
    burst
}

/// Every answer to `burst` before its `ECHO END`, as text (at most `limit` bytes).
fn answers_to(mut c: Raw, burst: &[u8], limit: usize, cmds: &[&[&str]]) -> String {
    c.send(burst);
    let mut got = Vec::new();
    loop {
        let frame = c.read();
        if frame == b"$3\r\nEND\r\n" {
            break;
        }
        got.extend(frame);
        assert!(got.len() < limit, "{cmds:?}");
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A differential run between the two sessions: `rounds` random pipelines mixing MEM.* verbs
/// (malformed ones, lookups of empty scopes and threads, the model's vectors, memories written,
/// recalled, consolidated and forgotten, turns and sessions, refusals inside MULTI) with CLIENT
/// REPLY, transactions and plain commands, each in one write, under RESP2 and RESP3, answered
/// byte for byte alike by `single` (one Redis) and `cluster` (a Redis Cluster) once ids, times,
/// TTLs and stream ids are named alike. Every request gives USER, always the same one (a thread's
/// name is its user's own in cluster mode: PROTOCOL §6).
pub fn sessions_answer_mem_verbs_alike(single: &Proxy, cluster: &Proxy, seed: u64, rounds: usize) {
    let mut next = draws(seed);
    let pool: &[&[&str]] = &[
        &["MEM.PING"],
        &["MEM.PING", "extra"],
        &["MEM.NOSUCH"],
        &["MEM.RECALL"],
        &["MEM.RECALL", "where do I live?", "USER", "K:u"],
        &[
            "MEM.RECALL",
            "where?",
            "USER",
            "K:u",
            "MODE",
            "rank",
            "K",
            "3",
        ],
        &["MEM.RECALL", "where?", "USER", "K:u", "K", "0"],
        &["MEM.RECALL", "where?", "USER", "K:u", "MODE", "nope"],
        &["MEM.RECALL", "where?", "USER", "K:u", "AT", "-5"],
        &["MEM.LIST", "USER", "K:u"],
        &["MEM.LIST", "USER", "K:u", "LIMIT", "x", "1"],
        &["MEM.SESSION", "GET", "K:t", "USER", "K:u"],
        &["MEM.SESSION", "BOGUS"],
        &["MEM.EVENTS", "K:t", "USER", "K:u"],
        &["MEM.FORGET"],
        &["MEM.REMEMBER"],
        &["MEM.REMEMBER", "x", "USER", "K:u", "TTL", "-1"],
        &["MEM.TURN", "K:t"],
        &["MEM.EMBED", "hello"],
        &["MEM.HELP"],
        // Memories written at fixed times: ids aside (named alike below), both answer the same.
        &[
            "MEM.REMEMBER",
            "I live in Lisbon.",
            "USER",
            "K:u",
            "CREATED",
            "1700000000",
            "PERSIST",
        ],
        &[
            "MEM.REMEMBER",
            "My dog is called Rex.",
            "USER",
            "K:u",
            "CREATED",
            "1700000100",
            "PERSIST",
        ],
        &[
            "MEM.REMEMBER",
            "I work as a nurse.",
            "USER",
            "K:u",
            "CREATED",
            "1700000200",
            "TTL",
            "1000000",
        ],
        &[
            "MEM.RECALL",
            "what is my pet's name?",
            "USER",
            "K:u",
            "MODE",
            "rank",
            "K",
            "2",
        ],
        &[
            "MEM.RECALL",
            "which city?",
            "USER",
            "K:u",
            "MODE",
            "vector",
            "THRESHOLD",
            "2",
        ],
        &["MEM.CONSOLIDATE", "USER", "K:u", "DRYRUN"],
        &["MEM.FORGET", "USER", "K:u"],
        // Sessions and turns: their times, TTLs and stream ids are named alike below.
        &[
            "MEM.TURN",
            "K:t",
            "user",
            "I moved to Porto last year.",
            "USER",
            "K:u",
        ],
        &[
            "MEM.TURN",
            "K:t",
            "assistant",
            "Porto is lovely.",
            "USER",
            "K:u",
            "REMEMBER",
            "SKIP",
        ],
        &[
            "MEM.SESSION",
            "START",
            "K:t",
            "USER",
            "K:u",
            "GOAL",
            "plan a trip",
        ],
        &["MEM.SESSION", "SCRATCHPAD", "K:t", "notes", "USER", "K:u"],
        &["MEM.SESSION", "END", "K:t", "USER", "K:u"],
        &["MEM.SESSION", "GET", "K:t", "USER", "K:u"],
        // HELLO's own reply differs (ids, "mode"): sent under CLIENT REPLY SKIP, outside MULTI.
        &["HELLO", "3"],
        &["HELLO", "2"],
        &["CLIENT", "REPLY", "OFF"],
        &["CLIENT", "REPLY", "ON"],
        &["CLIENT", "REPLY", "SKIP"],
        &["MULTI"],
        &["EXEC"],
        &["DISCARD"],
        &["PING"],
        &["SET", "K:a", "v"],
        &["GET", "K:a"],
        &["GET"],
    ];
    for round in 0..rounds {
        let cmds = random_pipeline(pool, &mut next, 12);
        let burst = burst_of(&cmds, &format!("{{mdz{seed}-{round}}}"));
        let outs: Vec<String> = [single, cluster]
            .iter()
            .map(|p| ids_named_alike(&answers_to(p.raw(), &burst, 1 << 22, &cmds)))
            .collect();
        assert_eq!(outs[0], outs[1], "seed {seed} round {round}: {cmds:?}");
    }
}

/// Memory ids (12 lowercase hex digits standing alone) replaced by their order of appearance;
/// the hash tag a cluster-mode id starts with (`{~…}:`, PROTOCOL §6) and bulk lengths dropped.
fn ids_named_alike(s: &str) -> String {
    let mut untagged = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("{~") {
        let tail = &rest[at + 2..];
        let hex = tail.bytes().take_while(u8::is_ascii_hexdigit).count();
        untagged.push_str(&rest[..at]);
        if tail[hex..].starts_with("}:") {
            rest = &tail[hex + 2..];
        } else {
            untagged.push_str("{~");
            rest = tail;
        }
    }
    untagged.push_str(rest);
    // Bulk lengths follow the ids' lengths: left out. Times, TTLs and stream ids (an integer of
    // six digits or more, a number of nine before its point, digits-digits) differ by the clock.
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    let untagged: Vec<&str> = untagged
        .split("\r\n")
        .map(|l| {
            let body = l.trim_start_matches([':', ',']);
            let (int, frac) = body.split_once('.').unwrap_or((body, ""));
            let stream_id = body
                .split_once('-')
                .is_some_and(|(a, b)| a.len() >= 9 && digits(a) && digits(b));
            match l.strip_prefix('$') {
                Some(n) if digits(n) => "$",
                // (Twelve digits alone are a memory id, named below.)
                _ if digits(int)
                    && int.len() >= 6
                    && (frac.is_empty() || digits(frac))
                    && !(frac.is_empty() && int.len() == 12) =>
                {
                    "<n>"
                }
                _ if stream_id => "<n>",
                _ => l,
            }
        })
        .collect();
    let untagged = untagged.join("\r\n");
    let s = untagged.as_str();
    let b = s.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric();
    let (mut out, mut seen, mut i) = (String::new(), Vec::<String>::new(), 0);
    while i < b.len() {
        let end = i + 12;
        let alone =
            (i == 0 || !word(b[i - 1])) && (end == b.len() || (end < b.len() && !word(b[end])));
        if end <= b.len()
            && alone
            && b[i..end]
                .iter()
                .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        {
            let id = &s[i..end];
            let n = seen.iter().position(|x| x == id).unwrap_or_else(|| {
                seen.push(id.to_string());
                seen.len() - 1
            });
            out.push_str(&format!("<id{n:06}>"));
            i = end;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// MULTI/EXEC with a MEM.* inside (refused, the transaction goes on), WATCH aborting, DISCARD.
pub fn transactions_refuse_mem_verbs(proxy: &Proxy) {
    let p = proxy;
    let key = unique("tx");
    let mut c = p.raw();
    c.send(b"MULTI\r\n");
    assert_eq!(c.read_str(), "+OK\r\n");
    c.cmd(&[b"SET", key.as_bytes(), b"1"]);
    assert_eq!(c.read_str(), "+QUEUED\r\n");
    c.cmd(&[b"MEM.PING"]);
    assert!(c
        .read_str()
        .starts_with("-ERR MEM.PING cannot run inside MULTI"));
    c.cmd(&[b"INCR", key.as_bytes()]);
    assert_eq!(c.read_str(), "+QUEUED\r\n");
    c.send(b"EXEC\r\n");
    assert_eq!(c.read_str(), "*2\r\n+OK\r\n:2\r\n");

    // WATCH aborts when another client touches the key.
    c.cmd(&[b"WATCH", key.as_bytes()]);
    assert_eq!(c.read_str(), "+OK\r\n");
    let mut other = p.raw();
    other.cmd(&[b"SET", key.as_bytes(), b"x"]);
    assert_eq!(other.read_str(), "+OK\r\n");
    c.send(b"MULTI\r\n");
    c.cmd(&[b"SET", key.as_bytes(), b"mine"]);
    c.send(b"EXEC\r\n");
    assert_eq!(c.read_str(), "+OK\r\n");
    assert_eq!(c.read_str(), "+QUEUED\r\n");
    assert_eq!(c.read_str(), "*-1\r\n");

    c.send(b"MULTI\r\n");
    c.cmd(&[b"SET", key.as_bytes(), b"discarded"]);
    c.send(b"DISCARD\r\n");
    c.cmd(&[b"GET", key.as_bytes()]);
    assert_eq!(c.read_str(), "+OK\r\n");
    assert_eq!(c.read_str(), "+QUEUED\r\n");
    assert_eq!(c.read_str(), "+OK\r\n");
    assert_eq!(c.read_str(), "$1\r\nx\r\n");
    // MEM.* work again after the transaction.
    c.cmd(&[b"MEM.PING"]);
    assert_eq!(c.read_str(), "+PONG\r\n");
}

/// CLIENT REPLY SKIP and OFF silence ordinary and MEM.* replies alike; ON answers; RESET as
/// Redis answers it under each.
pub fn client_reply_silences(proxy: &Proxy) {
    let mut c = proxy.raw();
    let key = unique("reply");
    c.send(b"CLIENT REPLY SKIP\r\n");
    c.cmd(&[b"SET", key.as_bytes(), b"1"]);
    c.cmd(&[b"MEM.PING"]);
    assert_eq!(c.read_str(), "+PONG\r\n");
    c.send(b"CLIENT REPLY OFF\r\n");
    c.cmd(&[b"INCR", key.as_bytes()]);
    c.cmd(&[b"MEM.PING"]);
    c.send(b"CLIENT REPLY ON\r\n");
    assert_eq!(c.read_str(), "+OK\r\n");
    c.cmd(&[b"GET", key.as_bytes()]);
    assert_eq!(c.read_str(), "$1\r\n2\r\n");
    // RESET turns replies on before it answers: answered under OFF, not under SKIP (Redis 8.2).
    c.send(b"CLIENT REPLY OFF\r\n");
    c.cmd(&[b"SET", key.as_bytes(), b"3"]);
    c.send(b"RESET\r\n");
    c.send(b"PING\r\n");
    assert_eq!(c.read_str(), "+RESET\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
    // RESET under SKIP is silent and still resets: MEM.* answer in RESP2 again after HELLO 3.
    c.cmd(&[b"HELLO", b"3"]);
    assert!(c.read_str().starts_with('%'));
    c.send(b"CLIENT REPLY SKIP\r\nRESET\r\nPING\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
    c.cmd(&[b"MEM.PING"]);
    assert_eq!(c.read_str(), "+PONG\r\n");
    c.cmd(&[b"MEM.INFO"]);
    let info = c.read_str();
    assert!(info.starts_with('*'), "{info}");
}

/// HELLO, AUTH and SELECT queued inside MULTI change the connection when EXEC runs them (Redis
/// queues them): the proxy follows each by its element of EXEC's reply — MEM.* answer in the
/// new protocol, and in cluster mode every master's connection speaks it (single mode kept
/// RESP2 for MEM.*, cluster mode switched only the transaction's master). An aborted
/// transaction, or an element that is an error, changes nothing.
pub fn state_changed_inside_multi_follows_exec(proxy: &Proxy) {
    let keys: Vec<String> = (0..8).map(|i| unique(&format!("txstate{i}"))).collect();
    let mut c = proxy.raw();
    for k in &keys {
        c.cmd(&[b"HSET", k.as_bytes(), b"f", b"v"]);
        assert_eq!(c.read_str(), ":1\r\n");
    }
    let mem_null = |c: &mut Raw| {
        let thread = unique("none");
        c.cmd(&[b"MEM.SESSION", b"GET", thread.as_bytes(), b"USER", b"u"]);
        c.read_str()
    };
    let tx = |c: &mut Raw, inner: &[&[&[u8]]]| {
        let mut burst = encode(&[b"MULTI"]);
        for args in inner {
            burst.extend(encode(args));
        }
        burst.extend(encode(&[b"EXEC"]));
        c.send(&burst);
        assert_eq!(c.read_str(), "+OK\r\n");
        let queued: Vec<String> = inner.iter().map(|_| c.read_str()).collect();
        (queued, c.read_str())
    };
    // Refused while queueing: EXECABORT, the protocol stays RESP2.
    let (queued, exec) = tx(&mut c, &[&[b"HELLO", b"3"], &[b"NOSUCHCOMMAND"]]);
    assert_eq!(queued[0], "+QUEUED\r\n");
    assert!(queued[1].starts_with("-ERR unknown command"), "{queued:?}");
    assert!(exec.starts_with("-EXECABORT"), "{exec}");
    assert_eq!(mem_null(&mut c), "$-1\r\n");
    // An element that is an error changes nothing.
    let (_, exec) = tx(&mut c, &[&[b"HELLO", b"3", b"SETNAME", b"a b"]]);
    assert!(exec.starts_with("*1\r\n-ERR Client names"), "{exec}");
    assert_eq!(mem_null(&mut c), "$-1\r\n");
    // HELLO 3 run by EXEC: RESP3 from then on, wherever the keys live.
    let (_, exec) = tx(&mut c, &[&[b"HELLO", b"3"]]);
    assert!(exec.starts_with("*1\r\n%"), "{exec}");
    assert_eq!(mem_null(&mut c), "_\r\n");
    for k in &keys {
        c.cmd(&[b"HGETALL", k.as_bytes()]);
        assert_eq!(c.read_str(), "%1\r\n$1\r\nf\r\n$1\r\nv\r\n", "{k}");
    }
    // And back.
    let (_, exec) = tx(&mut c, &[&[b"PING"], &[b"HELLO", b"2"]]);
    assert!(exec.starts_with("*2\r\n+PONG\r\n*"), "{exec}");
    assert_eq!(mem_null(&mut c), "$-1\r\n");
    for k in &keys {
        c.cmd(&[b"HGETALL", k.as_bytes()]);
        assert_eq!(c.read_str(), "*2\r\n$1\r\nf\r\n$1\r\nv\r\n", "{k}");
    }
    // RESET inside MULTI runs at once, as Redis runs it: the transaction is gone, RESP2 again
    // (cluster mode refused it and failed the transaction).
    tx(&mut c, &[&[b"HELLO", b"3"]]);
    let mut burst = encode(&[b"MULTI"]);
    burst.extend(encode(&[b"SET", keys[0].as_bytes(), b"w"]));
    burst.extend(encode(&[b"RESET"]));
    burst.extend(encode(&[b"EXEC"]));
    c.send(&burst);
    for want in [
        "+OK\r\n",
        "+QUEUED\r\n",
        "+RESET\r\n",
        "-ERR EXEC without MULTI\r\n",
    ] {
        assert_eq!(c.read_str(), want);
    }
    assert_eq!(mem_null(&mut c), "$-1\r\n");
    c.cmd(&[b"TYPE", keys[0].as_bytes()]);
    assert_eq!(c.read_str(), "+hash\r\n");
}

/// HELLO under CLIENT REPLY OFF or SKIP changes the connection without a word from Redis: the
/// proxy still follows it (MEM.* answer in that protocol), and not a HELLO that failed. Single
/// mode lost such changes (found by `sessions_answer_mem_verbs_alike`).
pub fn state_changed_under_client_reply_off_is_followed(proxy: &Proxy) {
    let mut c = proxy.raw();
    let mem_null = |c: &mut Raw| {
        let thread = unique("none");
        c.cmd(&[b"MEM.SESSION", b"GET", thread.as_bytes(), b"USER", b"u"]);
        c.read_str()
    };
    let quiet = |c: &mut Raw, mode: &[u8], args: &[&[u8]]| {
        let mut burst = encode(&[b"CLIENT", b"REPLY", mode]);
        burst.extend(encode(args));
        if mode == b"OFF" {
            burst.extend(encode(&[b"CLIENT", b"REPLY", b"ON"]));
        }
        burst.extend(encode(&[b"ECHO", b"x"]));
        c.send(&burst);
        if mode == b"OFF" {
            assert_eq!(c.read_str(), "+OK\r\n");
        }
        assert_eq!(c.read_str(), "$1\r\nx\r\n");
    };
    quiet(&mut c, b"OFF", &[b"HELLO", b"3"]);
    assert_eq!(mem_null(&mut c), "_\r\n");
    quiet(&mut c, b"SKIP", &[b"HELLO", b"2"]);
    assert_eq!(mem_null(&mut c), "$-1\r\n");
    // Refused by Redis (a client name with a space): nothing changes.
    quiet(&mut c, b"OFF", &[b"HELLO", b"3", b"SETNAME", b"a b"]);
    assert_eq!(mem_null(&mut c), "$-1\r\n");
    quiet(&mut c, b"SKIP", &[b"HELLO", b"3"]);
    assert_eq!(mem_null(&mut c), "_\r\n");
    c.cmd(&[b"PING"]);
    assert_eq!(c.read_str(), "+PONG\r\n");
}

/// CLIENT TRACKING (RESP3): keys the client read and another client then changes are
/// invalidated by pushes that reach the client while it sends nothing (in cluster mode from
/// whichever master holds each key); BCAST with a prefix too.
/// A MEM.* that times out (Redis paused) leaves its late replies to be dropped when they come:
/// the client keeps its connection, and the WATCH on it holds — a watched key touched meanwhile
/// fails the EXEC, an untouched one lets it run. (`proxy`: `op_timeout_ms` 300.)
pub fn a_timed_out_mem_command_keeps_its_watch(
    proxy: &Proxy,
    direct: impl Fn() -> redis::Connection,
) {
    let user = unique("watch-kept");
    let key = unique("watch-kept-key");
    let mut c = proxy.client();
    // The index exists and the script is loaded: the timed-out call is the verb's own.
    q(
        &mut c,
        &["MEM.REMEMBER", "The user drinks tea.", "USER", &user],
    );
    assert_eq!(as_str(&q(&mut c, &["WATCH", &key])), "OK");
    let mut d = direct();
    q(&mut d, &["CLIENT", "PAUSE", "1500", "ALL"]);
    let e = err(
        &mut c,
        &["MEM.REMEMBER", "The user drinks coffee.", "USER", &user],
    );
    assert!(e.contains("timeout"), "{e}");
    // Answered once the pause is over; then the watched key is touched by another client.
    q(&mut d, &["PING"]);
    q(&mut d, &["SET", &key, "x"]);
    assert_eq!(as_str(&q(&mut c, &["MULTI"])), "OK");
    assert_eq!(as_str(&q(&mut c, &["SET", &key, "v"])), "QUEUED");
    assert_eq!(q(&mut c, &["EXEC"]), redis::Value::Nil, "the WATCH held");
    assert_eq!(as_str(&q(&mut c, &["GET", &key])), "x");
    // The late replies were dropped: the connection answers in step.
    assert_eq!(as_str(&q(&mut c, &["WATCH", &key])), "OK");
    assert_eq!(as_str(&q(&mut c, &["MULTI"])), "OK");
    assert_eq!(as_str(&q(&mut c, &["SET", &key, "w"])), "QUEUED");
    assert_eq!(items(&q(&mut c, &["EXEC"])).len(), 1);
    assert_eq!(as_str(&q(&mut c, &["GET", &key])), "w");
    let hits = q(
        &mut c,
        &["MEM.RECALL", "tea", "USER", &user, "MODE", "rank"],
    );
    assert!(!items(&hits).is_empty());
}

/// A command queued while Redis runs a busy script is refused (BUSY), and so is EXEC: the client
/// gets Redis's own `EXECABORT … BUSY …` (memproxy once answered a generic EXECABORT of its own
/// after a refused command); the transaction is gone afterwards. `redis`: a connection straight to the Redis that holds `key`
/// (its `busy-reply-threshold` is set to 10 ms); `redis_addr` its address, for the script.
pub fn exec_during_a_busy_script_answers_as_redis(
    proxy: &Proxy,
    redis: &mut redis::Connection,
    redis_addr: SocketAddr,
) {
    let key = unique("busy");
    q(redis, &["CONFIG", "SET", "busy-reply-threshold", "10"]);
    let mut c = proxy.raw();
    c.cmd(&[b"MULTI"]);
    assert_eq!(c.read_str(), "+OK\r\n");
    c.cmd(&[b"INCR", key.as_bytes()]);
    assert_eq!(c.read_str(), "+QUEUED\r\n");
    let mut busy = TcpStream::connect(redis_addr).unwrap();
    busy.write_all(&encode(&[b"EVAL", b"while true do end", b"0"]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // Refused while queueing: Redis flags its transaction, and EXEC gets Redis's reason.
    c.cmd(&[b"INCR", key.as_bytes()]);
    assert!(c.read_str().starts_with("-BUSY"));
    c.cmd(&[b"EXEC"]);
    let r = c.read_str();
    assert!(r.starts_with("-EXECABORT") && r.contains("BUSY"), "{r}");
    q(redis, &["SCRIPT", "KILL"]);
    // The script stops at its next hook call: BUSY until then.
    eventually("the script is killed", || {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("busy-reply-threshold")
            .arg("5000")
            .query::<()>(redis)
            .is_ok()
    });
    c.cmd(&[b"PING", b"asdf"]);
    assert_eq!(c.read_str(), "$4\r\nasdf\r\n", "the transaction is gone");
    let v = q(redis, &["EXISTS", &key]);
    assert_eq!(v, redis::Value::Int(0), "nothing of it ran");
}

pub fn tracking_invalidations_reach_an_idle_client(proxy: &Proxy) {
    let keys: Vec<String> = (0..8).map(|i| unique(&format!("tracked{i}"))).collect();
    let mut a = proxy.raw();
    a.cmd(&[b"HELLO", b"3"]);
    a.read();
    a.cmd(&[b"CLIENT", b"TRACKING", b"ON"]);
    assert_eq!(a.read_str(), "+OK\r\n");
    for k in &keys {
        a.cmd(&[b"GET", k.as_bytes()]);
        assert_eq!(a.read_str(), "_\r\n");
    }
    let mut b = proxy.client();
    for k in &keys {
        let _: () = redis::cmd("SET").arg(k).arg("v").query(&mut b).unwrap();
    }
    let push = |k: &str| format!(">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{k}\r\n", k.len());
    let mut got: Vec<String> = keys.iter().map(|_| a.read_str()).collect();
    let mut want: Vec<String> = keys.iter().map(|k| push(k)).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // Broadcast mode over a prefix: a key never read is invalidated too.
    let prefix = unique("bcast");
    a.cmd(&[b"CLIENT", b"TRACKING", b"OFF"]);
    assert_eq!(a.read_str(), "+OK\r\n");
    a.cmd(&[
        b"CLIENT",
        b"TRACKING",
        b"ON",
        b"BCAST",
        b"PREFIX",
        prefix.as_bytes(),
    ]);
    assert_eq!(a.read_str(), "+OK\r\n");
    let key = format!("{prefix}:x");
    let _: () = redis::cmd("SET").arg(&key).arg("v").query(&mut b).unwrap();
    assert_eq!(a.read_str(), push(&key));
    a.cmd(&[b"PING"]);
    assert_eq!(a.read_str(), "+PONG\r\n");
    // An invalidation that comes while a silenced MEM.* runs on the same connection (the key
    // in the user's slot; a long text keeps the verb busy) still reaches the client.
    let user = unique("trk");
    let key = format!("{{{user}}}:k");
    a.cmd(&[b"CLIENT", b"TRACKING", b"OFF"]);
    assert_eq!(a.read_str(), "+OK\r\n");
    a.cmd(&[b"CLIENT", b"TRACKING", b"ON"]);
    assert_eq!(a.read_str(), "+OK\r\n");
    a.cmd(&[b"GET", key.as_bytes()]);
    assert_eq!(a.read_str(), "_\r\n");
    let long: String = (0..600)
        .map(|i| format!("Sentence {i} of a long note about gardens and rivers. "))
        .collect();
    let mut burst = encode(&[b"CLIENT", b"REPLY", b"OFF"]);
    burst.extend(encode(&[
        b"MEM.REMEMBER",
        long.as_bytes(),
        b"USER",
        user.as_bytes(),
    ]));
    burst.extend(encode(&[b"CLIENT", b"REPLY", b"ON"]));
    a.send(&burst);
    std::thread::sleep(Duration::from_millis(300));
    let _: () = redis::cmd("SET").arg(&key).arg("v").query(&mut b).unwrap();
    // Other pushes may come (the verb runs as the client, so a key its script read and then
    // wrote is invalidated to the client too, as Redis does for the client's own writes).
    let mut seen = Vec::new();
    loop {
        let f = a.read_str();
        if f == "+OK\r\n" {
            break;
        }
        assert!(f.starts_with(">2\r\n$10\r\ninvalidate"), "{f}");
        seen.push(f);
    }
    assert!(seen.contains(&push(&key)), "{seen:?}");
    // While the client waits in BLPOP, invalidations still reach it at once: for keys on the
    // master it waits on and on the others (in cluster mode they came with BLPOP's reply).
    // (Invalidations of memproxy's own memory keys, from the MEM.REMEMBER above, may still come.)
    let ours = |f: &str| f.starts_with(">2\r\n$10\r\ninvalidate") && f.contains("agent:mem:");
    let keys: Vec<String> = (0..6)
        .map(|i| unique(&format!("blocked-tracked{i}")))
        .collect();
    for k in &keys {
        a.cmd(&[b"GET", k.as_bytes()]);
        let r = std::iter::repeat_with(|| a.read_str()).find(|f| !ours(f));
        assert_eq!(r.as_deref(), Some("_\r\n"));
    }
    let list = unique("blocked-list");
    a.cmd(&[b"BLPOP", list.as_bytes(), b"0"]);
    std::thread::sleep(Duration::from_millis(200));
    for k in &keys {
        let _: () = redis::cmd("SET").arg(k).arg("v").query(&mut b).unwrap();
    }
    let mut got: Vec<String> = Vec::new();
    while got.len() < keys.len() {
        let f = a.read_str();
        if !ours(&f) {
            got.push(f);
        }
    }
    let mut want: Vec<String> = keys.iter().map(|k| push(k)).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "invalidations while blocked");
    let _: i64 = redis::cmd("RPUSH")
        .arg(&list)
        .arg("x")
        .query(&mut b)
        .unwrap();
    let r = std::iter::repeat_with(|| a.read_str()).find(|f| !ours(f));
    assert_eq!(
        r,
        Some(format!("*2\r\n${}\r\n{list}\r\n$1\r\nx\r\n", list.len()))
    );
}

/// MEM.* nulls follow the negotiated protocol (HELLO 3, then HELLO 2). USER is given: cluster
/// mode finds a thread by its user (PROTOCOL.md §6).
pub fn resp3_mem_nulls_follow_the_protocol(proxy: &Proxy) {
    let mut c = proxy.raw();
    for (protocol, null) in [(b"3", "_\r\n"), (b"2", "$-1\r\n")] {
        c.cmd(&[b"HELLO", protocol]);
        c.read();
        let thread = unique("none");
        c.cmd(&[b"MEM.SESSION", b"GET", thread.as_bytes(), b"USER", b"u"]);
        assert_eq!(c.read_str(), null);
    }
}

/// A client blocked in BLPOP is released by another client's RPUSH (`direct`: a connection
/// straight to the Redis that holds `key`).
pub fn blocked_client_released(proxy: &Proxy, direct_to: impl Fn(&str) -> redis::Connection) {
    let p = proxy;
    let key = unique("blpop");
    let mut blocked = p.raw();
    blocked.cmd(&[b"BLPOP", key.as_bytes(), b"0"]);
    let mut pusher = p.client();
    // Wait until Redis sees the blocked client, then release it.
    let mut d = direct_to(&key);
    eventually("client blocked", || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut d).unwrap();
        info.lines()
            .any(|l| l.starts_with("blocked_clients:") && l != "blocked_clients:0")
    });
    let _: i64 = redis::cmd("RPUSH")
        .arg(&key)
        .arg("hello")
        .query(&mut pusher)
        .unwrap();
    let reply = blocked.read_str();
    assert_eq!(
        reply,
        format!("*2\r\n${}\r\n{key}\r\n$5\r\nhello\r\n", key.len())
    );
}

/// AUTH and HELLO 3 AUTH as an ACL user, in front of any upstream: a wrong password is Redis's
/// WRONGPASS and changes nothing; the right one makes every later command run as that user,
/// whatever Redis holds its key, MEM.* included. `on_every(args)` runs a command on every Redis
/// a key may live on (here: the user's creation).
pub fn auth_and_hello_as_an_acl_user(proxy: &Proxy, on_every: impl Fn(&[&str])) {
    let user = unique("acl");
    on_every(&[
        "ACL",
        "SETUSER",
        &user,
        "on",
        ">pw",
        "~ro:*",
        "+@read",
        "+@connection",
        "+acl|whoami",
    ]);
    let keys: Vec<String> = (0..8).map(|i| format!("ro:{}:{i}", unique("k"))).collect();
    let whoami = |c: &mut Raw| {
        c.cmd(&[b"ACL", b"WHOAMI"]);
        c.read_str()
    };
    let mut c = proxy.raw();
    c.cmd(&[b"AUTH", user.as_bytes(), b"wrong"]);
    assert!(c.read_str().starts_with("-WRONGPASS"));
    assert_eq!(whoami(&mut c), "$7\r\ndefault\r\n");
    c.cmd(&[b"AUTH", user.as_bytes(), b"pw"]);
    assert_eq!(c.read_str(), "+OK\r\n");
    assert_eq!(whoami(&mut c), format!("${}\r\n{user}\r\n", user.len()));
    for k in &keys {
        c.cmd(&[b"SET", k.as_bytes(), b"1"]);
        let r = c.read_str();
        assert!(r.starts_with("-NOPERM"), "{k}: {r}");
        c.cmd(&[b"GET", k.as_bytes()]);
        assert_eq!(c.read_str(), "$-1\r\n");
    }
    c.cmd(&[b"MEM.PING"]);
    assert_eq!(c.read_str(), "+PONG\r\n");

    let mut h = proxy.raw();
    h.cmd(&[b"HELLO", b"3", b"AUTH", user.as_bytes(), b"nope"]);
    assert!(h.read_str().starts_with("-WRONGPASS"));
    assert_eq!(whoami(&mut h), "$7\r\ndefault\r\n");
    h.cmd(&[b"HELLO", b"3", b"AUTH", user.as_bytes(), b"pw"]);
    assert!(h.read_str().starts_with('%'));
    assert_eq!(whoami(&mut h), format!("${}\r\n{user}\r\n", user.len()));
    for k in &keys {
        h.cmd(&[b"SET", k.as_bytes(), b"1"]);
        let r = h.read_str();
        assert!(r.starts_with("-NOPERM"), "{k}: {r}");
        h.cmd(&[b"GET", k.as_bytes()]);
        assert_eq!(h.read_str(), "_\r\n", "RESP3's null");
    }
}

/// `blocked_clients` of a Redis's INFO.
pub fn blocked_clients(d: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("clients").query(d).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO clients has blocked_clients")
}

/// The connection named `name` on a Redis, as CLIENT LIST shows it (`None`: no such connection).
pub fn client_named(d: &mut redis::Connection, name: &str) -> Option<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(d).unwrap();
    let tag = format!(" name={name} ");
    list.lines().find(|l| l.contains(&tag)).map(str::to_string)
}

/// The connection named `name` is blocked in a command (its flags have `b`).
pub fn blocked_named(d: &mut redis::Connection, name: &str) -> bool {
    client_named(d, name).is_some_and(|l| {
        l.split(' ')
            .find_map(|f| f.strip_prefix("flags="))
            .is_some_and(|f| f.contains('b'))
    })
}

/// A client of `proxy` named `name` (CLIENT SETNAME: Redis sees the name on every connection the
/// proxy opens for it), so tests find its connection whatever else runs beside them.
pub fn named_client(proxy: &Proxy, name: &str) -> Raw {
    let mut c = proxy.raw();
    c.cmd(&[b"CLIENT", b"SETNAME", name.as_bytes()]);
    assert_eq!(c.read_str(), "+OK\r\n");
    c
}

/// A client that goes away while blocked (lists, sorted sets, streams, a consumer group) takes its
/// upstream connection with it at once: Redis keeps no connection for it, and the next pushed
/// element goes to a live consumer. `direct_to(key)`: a connection to the Redis holding `key`
/// (every key here shares one slot). Each client is found by its name, as other tests block
/// beside this one.
pub fn vanished_blocked_clients_leave_nothing(
    proxy: &Proxy,
    direct_to: impl Fn(&str) -> redis::Connection,
) {
    let k = format!("{{{}}}", unique("blk"));
    let dst = format!("{k}:dst");
    let group_stream = format!("{k}:grp");
    let mut d = direct_to(&k);
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&group_stream)
        .arg("g")
        .arg("$")
        .arg("MKSTREAM")
        .query::<()>(&mut d)
        .unwrap();
    let blocking: [Vec<&[u8]>; 6] = [
        vec![b"BLPOP", k.as_bytes(), b"0"],
        vec![b"BRPOP", k.as_bytes(), b"0"],
        vec![
            b"BLMOVE",
            k.as_bytes(),
            dst.as_bytes(),
            b"LEFT",
            b"RIGHT",
            b"0",
        ],
        vec![b"BZPOPMIN", k.as_bytes(), b"0"],
        vec![b"XREAD", b"BLOCK", b"0", b"STREAMS", k.as_bytes(), b"$"],
        vec![
            b"XREADGROUP",
            b"GROUP",
            b"g",
            b"c1",
            b"BLOCK",
            b"0",
            b"STREAMS",
            group_stream.as_bytes(),
            b">",
        ],
    ];
    for cmd in blocking {
        let name = unique("blkc");
        let mut c = named_client(proxy, &name);
        c.cmd(&cmd);
        eventually("the client blocks", || blocked_named(&mut d, &name));
        drop(c);
        eventually("its upstream connection is gone", || {
            client_named(&mut d, &name).is_none()
        });
    }
    // Fairness: the dead consumers of `k` above do not take the element.
    let live_name = unique("live");
    let mut live = named_client(proxy, &live_name);
    live.cmd(&[b"BLPOP", k.as_bytes(), b"0"]);
    eventually("live blocks", || blocked_named(&mut d, &live_name));
    let _: i64 = redis::cmd("RPUSH").arg(&k).arg("v").query(&mut d).unwrap();
    assert!(live.read_str().contains("$1\r\nv\r\n"));
}

/// A pipeline whose last request blocks gets the replies before it at once (as Redis's "unblock
/// fairness is kept while pipelining"): a client blocked first is served first, the pipelining
/// client sees its LPUSH answered while its own BLPOP blocks, and that BLPOP is served next.
pub fn replies_before_a_blocking_command_arrive_first(
    proxy: &Proxy,
    direct_to: impl Fn(&str) -> redis::Connection,
) {
    let k = format!("{{{}}}", unique("fair"));
    let mut d = direct_to(&k);
    let (first, second) = (unique("fair1"), unique("fair2"));
    let mut a = named_client(proxy, &first);
    a.cmd(&[b"BLPOP", k.as_bytes(), b"0"]);
    eventually("the first client blocks", || blocked_named(&mut d, &first));
    let mut b = named_client(proxy, &second);
    let mut bytes = encode(&[b"LPUSH", k.as_bytes(), b"1"]);
    bytes.extend(encode(&[b"BLPOP", k.as_bytes(), b"0"]));
    b.send(&bytes);
    assert!(
        a.read_str().ends_with("$1\r\n1\r\n"),
        "the first blocked is served first"
    );
    assert_eq!(
        b.read_str(),
        ":1\r\n",
        "the LPUSH is answered before the BLPOP blocks"
    );
    eventually("the pipelining client blocks", || {
        blocked_named(&mut d, &second)
    });
    let _: i64 = redis::cmd("LPUSH").arg(&k).arg("2").query(&mut d).unwrap();
    assert!(b.read_str().ends_with("$1\r\n2\r\n"));
}

/// The metrics count the same things in front of any upstream: clients connected, MEM.*
/// requests by verb and outcome (the side at fault), latency, nothing lost. A proxy of its own
/// (with an HTTP listener) in front of `upstream_url`, so the counts are this test's.
pub fn metrics_follow_requests(upstream_url: &str) {
    let port = free_port();
    let proxy = Proxy::start(upstream_url, |c| {
        c.http_listen = Some(format!("127.0.0.1:{port}"));
    });
    let addr = format!("127.0.0.1:{port}");
    eventually("the HTTP listener", || {
        http(&addr, "GET", "/healthz", "").0 == 200
    });
    let metrics = || http(&addr, "GET", "/metrics", "").1;
    let user = unique("metrics");
    let mut con = proxy.client();
    q(
        &mut con,
        &["MEM.REMEMBER", "The user likes chess.", "USER", &user],
    );
    q(&mut con, &["MEM.PING"]);
    q(&mut con, &["SET", &format!("{{{user}}}:k"), "v"]);
    let _ = err(&mut con, &["MEM.RECALL", "x", "K", "0", "USER", &user]);
    let m = metrics();
    for want in [
        r#"memproxy_mem_requests_total{outcome="ok",verb="mem.remember"} 1"#,
        r#"memproxy_mem_requests_total{outcome="ok",verb="mem.ping"} 1"#,
        r#"memproxy_mem_requests_total{outcome="client",verb="mem.recall"} 1"#,
        "memproxy_mem_request_seconds_bucket{verb=\"mem.remember\"",
        "memproxy_clients 1",
        "memproxy_upstream_lost_total 0",
    ] {
        assert!(m.contains(want), "missing {want} in\n{m}");
    }
    drop(con);
    eventually("the client counted out", || {
        metrics().contains("memproxy_clients 0")
    });
}

/// COMMAND, COMMAND COUNT / INFO / DOCS / LIST answer Redis's entries with the MEM.* verbs
/// merged in (`d`: a connection straight to a Redis behind `proxy`).
pub fn command_table_merges_the_mem_verbs(proxy: &Proxy, d: &mut redis::Connection) {
    let mut con = proxy.client();
    let n = |c: &mut redis::Connection| as_i64(&q(c, &["COMMAND", "COUNT"]));
    let verbs = memproxy::mem::catalog::VERBS.len() as i64;
    assert_eq!(n(&mut con), n(d) + verbs);
    // COMMAND: every entry, Redis's and ours, in one well-formed reply.
    let all = items(&q(&mut con, &["COMMAND"])).to_vec();
    assert_eq!(all.len() as i64, n(d) + verbs);
    let recall = all
        .iter()
        .find(|e| as_str(&items(e)[0]) == "mem.recall")
        .expect("mem.recall in COMMAND");
    assert_eq!(as_i64(&items(recall)[1]), -2);
    // COMMAND INFO mixes Redis's entries and ours in the order asked.
    let info = items(&q(
        &mut con,
        &["COMMAND", "INFO", "get", "MEM.TURN", "nosuch"],
    ))
    .to_vec();
    assert_eq!(as_str(&items(&info[0])[0]), "get");
    assert_eq!(as_str(&items(&info[1])[0]), "mem.turn");
    assert_eq!(as_i64(&items(&info[1])[1]), -4);
    assert_eq!(info[2], redis::Value::Nil);
    // COMMAND DOCS in both protocols, with arguments and tokens.
    let docs = q(&mut con, &["COMMAND", "DOCS", "mem.recall"]);
    let text = format!("{docs:?}");
    assert!(
        text.contains("THRESHOLD") && text.contains("summary"),
        "{text}"
    );
    let mut c3 = proxy.raw();
    c3.cmd(&[b"HELLO", b"3"]);
    c3.read();
    c3.cmd(&[b"COMMAND", b"DOCS", b"get", b"mem.remember"]);
    let r = c3.read_str();
    assert!(
        r.starts_with("%2\r\n") && r.contains("mem.remember") && r.contains("NODEDUP"),
        "{r}"
    );
    let list = items(&q(&mut con, &["COMMAND", "LIST"])).to_vec();
    assert!(list.iter().any(|v| as_str(v) == "mem.help"));
    let filtered = |con: &mut redis::Connection, by: &str, what: &str| -> Vec<String> {
        let mut names: Vec<String> = items(&q(con, &["COMMAND", "LIST", "FILTERBY", by, what]))
            .iter()
            .map(as_str)
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        filtered(&mut con, "PATTERN", "MEM.RE*"),
        ["mem.recall", "mem.remember"]
    );
    assert_eq!(filtered(&mut con, "PATTERN", "get"), ["get"]);
    let writes = filtered(&mut con, "ACLCAT", "write");
    assert!(writes.iter().any(|n| n == "mem.forget") && writes.iter().any(|n| n == "set"));
    assert!(!writes.iter().any(|n| n == "mem.recall"));
    // MEM.HELP, module style.
    let help = items(&q(&mut con, &["MEM.HELP"])).to_vec();
    assert!(help
        .iter()
        .any(|l| as_str(l).starts_with("MEM.RECALL query [USER user]")));
}

/// (P)UNSUBSCRIBE on a connection that subscribed to nothing answers once a channel (once with
/// none named) and leaves the session as it was: MEM.* still answered by memproxy, under RESP2
/// and RESP3 (issue 37: single mode turned the connection into a byte tunnel for good).
pub fn unsubscribe_keeps_the_session(proxy: &Proxy) {
    let mut c = proxy.raw();
    c.send(
        &[
            encode(&[b"UNSUBSCRIBE"]),
            encode(&[b"UNSUBSCRIBE", b"a", b"b", b"c"]),
            encode(&[b"PUNSUBSCRIBE", b"p*"]),
            encode(&[b"MEM.PING"]),
            encode(&[b"PING"]),
        ]
        .concat(),
    );
    for want in ["unsubscribe", "a", "b", "c", "p*"] {
        let r = c.read_str();
        assert!(r.starts_with("*3") && r.contains(want), "{want}: {r}");
    }
    let pong = c.read_str();
    assert!(pong.contains("PONG") && !pong.starts_with('-'), "{pong}");
    assert_eq!(c.read_str(), "+PONG\r\n");
    // RESP3: the answers are pushes; MEM.* replies are maps.
    let mut c = proxy.raw();
    c.cmd(&[b"HELLO", b"3"]);
    assert!(c.read_str().starts_with('%'));
    c.send(
        &[
            encode(&[b"UNSUBSCRIBE", b"x", b"y"]),
            encode(&[b"MEM.PING"]),
            encode(&[b"MEM.INFO"]),
        ]
        .concat(),
    );
    for ch in ["x", "y"] {
        let r = c.read_str();
        assert!(r.starts_with(">3") && r.contains(ch), "{r}");
    }
    let pong = c.read_str();
    assert!(pong.contains("PONG") && !pong.starts_with('-'), "{pong}");
    assert!(
        c.read_str().starts_with('%'),
        "MEM.INFO answered by memproxy"
    );
    // Redis sends these replies even under CLIENT REPLY OFF (as pushes are).
    let mut c = proxy.raw();
    c.send(
        &[
            encode(&[b"CLIENT", b"REPLY", b"OFF"]),
            encode(&[b"UNSUBSCRIBE", b"z"]),
            encode(&[b"CLIENT", b"REPLY", b"ON"]),
            encode(&[b"MEM.PING"]),
        ]
        .concat(),
    );
    let r = c.read_str();
    assert!(r.starts_with("*3") && r.contains('z'), "{r}");
    assert_eq!(c.read_str(), "+OK\r\n");
    let pong = c.read_str();
    assert!(pong.contains("PONG") && !pong.starts_with('-'), "{pong}");
}

/// A test that cannot run here says why: on stderr, and as a line of `target/tmp/skipped-tests`,
/// which `scripts/test.sh` prints after the run (cargo reports a returned test as `ok`).
pub fn skipped(test: &str, why: &str) {
    eprintln!("SKIPPED {test}: {why}");
    let list = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped-tests");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(list)
    {
        let _ = writeln!(f, "{test}: {why}");
    }
}

/// After `memproxy reembed`: the proxy of the new model (`now`, called `new` in messages) answers
/// MEM.RECALL "Any food allergies?" with memory `first` first, and the proxy of the old model
/// (`before`) refuses with the command to run.
pub fn reembedded(
    now: &mut redis::Connection,
    before: &mut redis::Connection,
    new: &str,
    old: &str,
    first: &str,
) {
    let question = "Any food allergies?";
    eventually(&format!("{new} to accept MEM.*"), || {
        redis::cmd("MEM.RECALL")
            .arg(question)
            .query::<redis::Value>(now)
            .is_ok()
    });
    let hits = q(now, &["MEM.RECALL", question]);
    assert_eq!(as_str(get(&items(&hits)[0], "id")), first);
    eventually(&format!("{old} to refuse"), || {
        redis::cmd("MEM.RECALL")
            .arg(question)
            .query::<redis::Value>(before)
            .is_err_and(|e| e.to_string().contains("memproxy reembed"))
    });
}
