//! The clients people use, against memproxy in front of a real Redis: redis-py (sync and
//! asyncio, RESP2 and RESP3, pipelines, transactions, pub/sub), node-redis and ioredis (the npm
//! packages pinned in tests/clients/package-lock.json), and redis-cli (plain, -3 for RESP3, --pipe).
//! Each sends every MEM.* verb and ordinary traffic; scripts/setup.sh installs them.

mod common;

use std::process::Command;

use common::*;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("client runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

fn port() -> String {
    shared().proxy.addr.port().to_string()
}

#[test]
fn redis_py_sync_and_async_both_protocols() {
    let py = deps().join("venv/bin/python");
    assert!(py.exists(), "run scripts/setup.sh (it installs redis-py)");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/redis_py_client.py");
    let out = run(Command::new(py).arg(script).arg(port()));
    assert!(out.contains(" passed, 0 failed"), "{out}");
}

#[test]
fn node_redis_and_ioredis() {
    let dir = deps().join("node");
    assert!(
        dir.join("node_modules/redis").exists() && dir.join("node_modules/ioredis").exists(),
        "run scripts/setup.sh (it installs node-redis and ioredis with npm ci)"
    );
    // ES modules resolve packages next to the script: run it from the install folder.
    let script = dir.join("node_clients.mjs");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/node_clients.mjs"),
        &script,
    )
    .unwrap();
    let out = run(Command::new("node").arg(&script).arg(port()));
    assert!(out.contains(" passed, 0 failed"), "{out}");
}

#[test]
fn redis_cli_plain_resp3_and_pipe() {
    let cli = |args: &[&str]| {
        run(Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port()])
            .args(args))
    };
    assert_eq!(cli(&["MEM.PING"]).trim(), "PONG");
    let user = unique("cli");
    let out = cli(&[
        "-3",
        "MEM.REMEMBER",
        "The user rides a tandem bike.",
        "USER",
        &user,
    ]);
    assert!(out.contains("id") && out.contains("deduped 0"), "{out}");
    let out = cli(&["MEM.RECALL", "Does the user ride a bike?", "USER", &user]);
    assert!(out.contains("tandem"), "{out}");
    let docs = cli(&["COMMAND", "DOCS", "mem.recall"]);
    assert!(
        docs.contains("summary") && docs.contains("THRESHOLD"),
        "{docs}"
    );
    // --pipe: raw RESP on stdin, ordinary and MEM.* mixed, every reply counted.
    let mut input = Vec::new();
    for i in 0..200 {
        input.extend(encode(&[b"SET", format!("{user}:{i}").as_bytes(), b"v"]));
        if i % 20 == 0 {
            input.extend(encode(&[
                b"MEM.RECALL",
                b"bicycle",
                b"USER",
                user.as_bytes(),
            ]));
        }
    }
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port(), "--pipe"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli (scripts/setup.sh installs Debian's redis-tools)");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("errors: 0, replies: 210"), "{text}");
    // Commands as lines on stdin (as `redis-cli < file`, and as at its prompt): redis-cli first
    // reads COMMAND DOCS for its hints, and asserts that argument flags are status replies.
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = format!("MEM.PING\nMEM.RECALL \"Does the user ride a bike?\" USER {user}\nPING\n");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("tandem") && text.ends_with("PONG\n"),
        "{text}"
    );
}
