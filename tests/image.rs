//! The container image (issue 28): deploy/Dockerfile is built with buildah (`deploy/build-image.sh`
//! makes the two base images from Debian's packages, since base images cannot be pulled here),
//! then run: memproxy starts as its non-root user and answers PING and MEM.EMBED against a Redis
//! on the host. Needs root, buildah, debootstrap and a Rust toolchain; where one is missing the
//! test says so and skips. It takes minutes (a release build inside the image).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn buildah(args: &[&str]) -> std::process::Output {
    Command::new("buildah")
        .arg("--storage-driver")
        .arg("vfs")
        .args(args)
        .output()
        .expect("buildah")
}

#[test]
fn the_image_builds_and_serves() {
    let root = unsafe { libc::geteuid() } == 0;
    let missing: Vec<&str> = ["buildah", "debootstrap", "rustc"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if !root || !missing.is_empty() {
        skipped(
            "the_image_builds_and_serves",
            &format!(
                "needs root and {} (scripts/setup.sh installs buildah and debootstrap when run as root)",
                if missing.is_empty() { "nothing else".to_string() } else { format!("{missing:?}") }
            ),
        );
        return;
    }
    let tag = format!("localhost/memproxy:test-{}", std::process::id());
    let started = Instant::now();
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/build-image.sh"
    ))
    .arg(&tag)
    .output()
    .unwrap();
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the image build failed:\n{}",
        &log[log.len().saturating_sub(4000)..]
    );
    eprintln!("image built in {:?}", started.elapsed());

    let redis = Redis::start(&[]);
    let ctr = String::from_utf8(buildah(&["from", &tag]).stdout)
        .unwrap()
        .trim()
        .to_string();
    assert!(!ctr.is_empty());
    // The image's user.
    let id = buildah(&["run", "--isolation", "chroot", &ctr, "--", "id", "-u"]);
    assert_eq!(
        String::from_utf8_lossy(&id.stdout).trim(),
        "10001",
        "runs as its non-root user"
    );
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut run = Command::new("timeout")
        .args([
            "300",
            "buildah",
            "--storage-driver",
            "vfs",
            "run",
            "--isolation",
            "chroot",
            &ctr,
            "--",
        ])
        .args([
            "/usr/local/bin/memproxy",
            "--upstream",
            &redis.url(),
            "--listen",
            &listen,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut con = loop {
        if let Ok(c) =
            redis::Client::open(format!("redis://{listen}")).and_then(|c| c.get_connection())
        {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "memproxy in the image did not start"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    let v: Vec<f64> = redis::cmd("MEM.EMBED")
        .arg("hello from the image")
        .query(&mut con)
        .unwrap();
    assert_eq!(v.len(), 384, "the model baked into the image answers");
    let r = q(
        &mut con,
        &["MEM.REMEMBER", "The user built the image", "USER", "img"],
    );
    assert!(!as_str(get(&r, "id")).is_empty());

    let _ = Command::new("pkill")
        .args(["-f", &format!("memproxy .*{listen}")])
        .status();
    let _ = run.kill();
    let _ = run.wait();
    buildah(&["rm", &ctr]);
    for image in [
        tag.as_str(),
        "docker.io/library/rust:1.92-bookworm",
        "docker.io/library/debian:bookworm-slim",
    ] {
        buildah(&["rmi", "-f", image]);
    }
    buildah(&["rmi", "--prune"]);
}
