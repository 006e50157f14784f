//! Production upstreams: `rediss://` through a real TLS terminator (rustls, certificates made by the
//! test: a CA, a server certificate, a client certificate) in front of the real redis-server, and
//! unix sockets on both sides of the proxy.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;

struct Pki {
    dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

impl Pki {
    fn new() -> Pki {
        let dir = std::env::temp_dir().join(unique("memproxy-pki"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki { dir, ca, ca_key }
    }

    /// A certificate for `name` signed by the CA: (cert path, key path, DER cert, DER key).
    fn issue(&self, name: &str) -> (PathBuf, PathBuf, Vec<u8>, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        // The name and 127.0.0.1 (a sentinel names its primary by IP address).
        let cert = rcgen::CertificateParams::new(vec![name.to_string(), "127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &self.ca, &self.ca_key)
            .unwrap();
        let (c, k) = (
            self.dir.join(format!("{name}.pem")),
            self.dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k, cert.der().to_vec(), key.serialize_der())
    }

    fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
}

/// A TLS terminator on a free port in front of Redis (optionally requiring a client certificate
/// signed by the CA). Runs on its own runtime thread for the rest of the test process.
fn terminator(pki: &Pki, redis_port: u16, client_auth: bool) -> u16 {
    let (_, _, cert, key) = pki.issue("localhost");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = if client_auth {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki.ca.der().clone()).unwrap();
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder
        .with_single_cert(
            vec![cert.into()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut up) =
                        tokio::net::TcpStream::connect(("127.0.0.1", redis_port)).await
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
    });
    port
}

fn exercise(proxy: &Proxy, user: &str) {
    let mut con = proxy.client();
    q(&mut con, &["SET", &format!("{user}:k"), "v"]);
    assert_eq!(as_str(&q(&mut con, &["GET", &format!("{user}:k")])), "v");
    q(
        &mut con,
        &[
            "MEM.REMEMBER",
            "The user keeps a vegetable garden.",
            "USER",
            user,
        ],
    );
    let hits = items(&q(
        &mut con,
        &["MEM.RECALL", "Does the user do gardening?", "USER", user],
    ))
    .len();
    assert_eq!(hits, 1);
    let info = q(&mut con, &["MEM.INFO"]);
    assert!(as_str(get(&info, "upstream")).ends_with("(tls)"));
}

#[test]
fn rediss_with_a_ca_file_insecure_and_a_client_certificate() {
    let redis = Redis::start(&[]);
    let pki = Pki::new();
    let tls_port = terminator(&pki, redis.port, false);
    let url = format!("rediss://localhost:{tls_port}");

    // Verified against the CA.
    let ca = pki.ca_path();
    let proxy = Proxy::start(&url, |c| c.tls_ca_file = Some(ca.clone()));
    let mut probe = proxy.raw();
    probe.cmd(&[b"PING"]);
    assert_eq!(probe.read_str(), "+PONG\r\n");
    exercise(&proxy, "tls-ca");

    // Without the CA (system roots only) the server is not trusted: refused, clearly.
    let strict = Proxy::start(&url, |_| {});
    let mut raw = strict.raw();
    let r = raw.read_str();
    assert!(
        r.starts_with("-ERR upstream unavailable") && r.contains("TLS"),
        "{r}"
    );

    // `tls_insecure` (development) accepts it.
    let insecure = Proxy::start(&url, |c| c.tls_insecure = true);
    exercise(&insecure, "tls-insecure");

    // A server that asks for a client certificate gets one.
    let mtls_port = terminator(&pki, redis.port, true);
    let (cert, key, _, _) = pki.issue("memproxy-client");
    let mtls_url = format!("rediss://localhost:{mtls_port}");
    let with_cert = Proxy::start(&mtls_url, |c| {
        c.tls_ca_file = Some(ca.clone());
        c.tls_cert_file = Some(cert.clone());
        c.tls_key_file = Some(key.clone());
    });
    exercise(&with_cert, "tls-mtls");
    let without = Proxy::start(&mtls_url, |c| c.tls_ca_file = Some(ca.clone()));
    let mut raw = without.raw();
    raw.cmd(&[b"PING"]);
    // Refused: an error line, or the connection closed (TLS 1.3 reports the missing certificate
    // after the handshake, so the refusal may come before or after the PING is relayed).
    use std::io::BufRead;
    let mut line = String::new();
    let _ = raw.stream.read_line(&mut line);
    assert!(
        !line.starts_with("+PONG"),
        "a server requiring a client certificate let us in: {line}"
    );
}

/// `rediss+sentinel://`: TLS to the sentinel and to the primary it names, both checked against
/// the test's CA (terminators in front of a real sentinel and a real Redis; the sentinel knows
/// the primary by its TLS address).
#[test]
fn rediss_behind_sentinel() {
    let pki = Pki::new();
    let redis = Redis::start(&[]);
    let primary_tls = terminator(&pki, redis.port, false);
    let sentinel = Redis::sentinel("tlsmaster", primary_tls);
    let sentinel_tls = terminator(&pki, sentinel.port, false);
    let url = format!("rediss+sentinel://127.0.0.1:{sentinel_tls}/tlsmaster");
    let proxy = Proxy::start(&url, |c| c.tls_ca_file = Some(pki.ca_path()));
    exercise(&proxy, &unique("tls-sentinel"));
    let mut d = direct(&redis);
    let keys: Vec<String> = redis::cmd("KEYS").arg("agent:mem:*").query(&mut d).unwrap();
    assert!(!keys.is_empty(), "written on the primary behind TLS");
    // Without the CA the sentinel's certificate is refused: one error line, nothing reached.
    let untrusted = Proxy::start(&url, |_| {});
    let mut raw = std::net::TcpStream::connect(untrusted.addr).unwrap();
    raw.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut got = String::new();
    raw.read_to_string(&mut got).unwrap();
    assert!(
        got.starts_with("-ERR upstream unavailable") && got.contains("TLS"),
        "{got:?}"
    );
}

fn unix_cmd(path: &Path, args: &[&[u8]]) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    s.write_all(&encode(args)).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn unix_sockets_to_the_upstream_and_from_clients() {
    let dir = std::env::temp_dir().join(unique("memproxy-unix"));
    std::fs::create_dir_all(&dir).unwrap();
    let redis_sock = dir.join("redis.sock");
    let redis = Redis::start(&[
        "--unixsocket",
        redis_sock.to_str().unwrap(),
        "--unixsocketperm",
        "700",
    ]);
    let _ = redis.port;
    let proxy_sock = dir.join("memproxy.sock");
    let listen = proxy_sock.display().to_string();
    let _proxy = Proxy::start(&format!("unix://{}", redis_sock.display()), |c| {
        c.listen = listen.clone()
    });
    assert_eq!(unix_cmd(&proxy_sock, &[b"MEM.PING"]), "+PONG\r\n");
    assert_eq!(unix_cmd(&proxy_sock, &[b"SET", b"u:k", b"v"]), "+OK\r\n");
    let r = unix_cmd(
        &proxy_sock,
        &[b"MEM.REMEMBER", b"The user plays go.", b"USER", b"unix"],
    );
    assert!(r.starts_with("*8\r\n$2\r\nid\r\n"), "{r}");
    let r = unix_cmd(&proxy_sock, &[b"MEM.INFO"]);
    assert!(r.contains("unix:"), "{r}");
}
