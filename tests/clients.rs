//! The clients people use, against memproxy in front of a real Redis: redis-py (sync and
//! asyncio, RESP2 and RESP3, pipelines, transactions, pub/sub), node-redis and ioredis (the npm
//! packages pinned in tests/clients/package-lock.json), and redis-cli (plain, -3 for RESP3, --pipe).
//! Each sends every MEM.* verb and ordinary traffic; scripts/setup.sh installs them. And the
//! project's own Python SDK (clients/python), pip-installed from the checkout, with its LangGraph
//! store run by `langgraph` from PyPI.

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

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name == "build" || name == "__pycache__" || name.to_string_lossy().ends_with(".egg-info")
        {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

/// The SDK installs with pip from a copy of the checkout (offline, no build isolation), then
/// drives every verb over RESP2 and RESP3, sync and async, errors with their codes, tool calls,
/// and the LangGraph store inside a small graph (tests/clients/memproxy_sdk.py).
#[test]
fn python_sdk_and_langgraph_store() {
    let py = deps().join("venv/bin/python");
    assert!(
        py.exists(),
        "run scripts/setup.sh (it installs redis-py and langgraph)"
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = std::env::temp_dir().join(unique("memproxy-sdk"));
    copy_dir(&root.join("clients/python"), &work.join("src"));
    run(Command::new(&py)
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
        ])
        .arg("--target")
        .arg(work.join("site"))
        .arg(work.join("src")));
    let out = run(Command::new(&py)
        .arg(root.join("tests/clients/memproxy_sdk.py"))
        .arg(port())
        .env("PYTHONPATH", work.join("site")));
    let _ = std::fs::remove_dir_all(&work);
    assert!(out.contains(" passed, 0 failed"), "{out}");
}

/// The SDK's tool definitions are the binary's catalog (`memproxy tools`, the MCP tools).
#[test]
fn sdk_tool_catalog_is_the_binarys() {
    let out = Command::new(env!("CARGO_BIN_EXE_memproxy"))
        .arg("tools")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let live: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shipped: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("clients/python/memproxy/tools.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        live, shipped,
        "regenerate it: memproxy tools > clients/python/memproxy/tools.json"
    );
}
