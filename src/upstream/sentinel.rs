//! Redis Sentinel: where the primary of a monitored master is now.
//!
//! `redis+sentinel://host:port[,host:port…]/master-name` names sentinels, not Redis. Every new
//! upstream connection (a client's, memproxy's own) asks them all at once `SENTINEL
//! get-master-addr-by-name` (after `AUTH` when `sentinel_password` is set) and connects to the
//! address a majority of the named sentinels give; when no majority answers alike (sentinels cut
//! off from each other, one left behind by a failover), the address most of those that answered
//! give, the first-listed sentinel's on a tie, and a warning names the disagreement. A lone
//! stale sentinel listed first therefore no longer sends clients to a demoted primary. A failover
//! is followed without any
//! state here: Sentinel disconnects the demoted primary's clients (`CLIENT KILL TYPE normal`) and a
//! killed primary drops them, so memproxy closes those clients as for any upstream loss, and their
//! reconnections, asking again, reach the promoted replica.

use std::time::Duration;

use bytes::BytesMut;
use redis::Value;

use crate::resp::read::{array, text};
use crate::upstream::Link;

#[derive(Clone)]
pub struct Sentinels {
    pub addrs: Vec<(String, u16)>,
    pub master: String,
    /// The sentinels' own ACL user and password (`sentinel_user`, `sentinel_password`), when
    /// they ask for one (`requirepass` in sentinel.conf); not Redis's.
    pub auth: Option<(Option<String>, String)>,
    /// `rediss+sentinel://`: the sentinels are asked over TLS (the primary is reached over TLS
    /// too, by the upstream).
    pub tls: Option<tokio_rustls::TlsConnector>,
    /// After every sentinel failed: until when new connections get that failure without asking
    /// again, and the wait before the next try (doubling from [`FIRST_WAIT`] to [`LONGEST_WAIT`]),
    /// so clients that reconnect in a loop do not flood sentinels that are down.
    backoff: std::sync::Arc<std::sync::Mutex<Backoff>>,
}

impl std::fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

#[derive(Debug, Default)]
struct Backoff {
    until: Option<std::time::Instant>,
    wait: Duration,
    why: String,
    /// When sentinels that disagree were last logged (at most once every [`WARN_EVERY`]: every
    /// connection asks again).
    warned: Option<std::time::Instant>,
}

const WARN_EVERY: Duration = Duration::from_secs(10);

/// The first wait after every sentinel failed, and the longest.
const FIRST_WAIT: Duration = Duration::from_millis(100);
const LONGEST_WAIT: Duration = Duration::from_secs(2);

impl Sentinels {
    /// From the URL's authority (`[user:password@]host:port,host:port`) and path
    /// (`/master-name`). The credentials, if any, are returned: they are Redis's (memproxy's own
    /// connection), not the sentinels'.
    pub fn parse(url: &str) -> Result<(Sentinels, Option<String>, Option<String>), String> {
        let rest = url
            .strip_prefix("redis+sentinel://")
            .ok_or_else(|| format!("{url}: not a redis+sentinel:// URL"))?;
        let (authority, master) = rest.split_once('/').ok_or_else(|| {
            format!("{url}: no master name (redis+sentinel://host:port/master-name)")
        })?;
        let master = master.trim_end_matches('/');
        if master.is_empty() || master.contains('/') {
            return Err(format!("{url}: the path must be the master's name"));
        }
        let (creds, hosts) = match authority.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, authority),
        };
        let decode = |s: &str| {
            url::form_urlencoded::parse(format!("x={s}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        let (user, password) = match creds {
            None => (None, None),
            Some(c) => match c.split_once(':') {
                Some((u, p)) => ((!u.is_empty()).then(|| decode(u)), Some(decode(p))),
                None => ((!c.is_empty()).then(|| decode(c)), None),
            },
        };
        let mut addrs = Vec::new();
        for h in hosts.split(',').filter(|h| !h.is_empty()) {
            let (host, port) = match h.rsplit_once(':') {
                Some((host, port)) => (
                    host,
                    port.parse::<u16>()
                        .map_err(|_| format!("{url}: bad sentinel port in '{h}'"))?,
                ),
                None => (h, 26379),
            };
            addrs.push((host.trim_matches(['[', ']']).to_string(), port));
        }
        if addrs.is_empty() {
            return Err(format!("{url}: no sentinel addresses"));
        }
        Ok((
            Sentinels {
                addrs,
                master: master.to_string(),
                auth: None,
                tls: None,
                backoff: Default::default(),
            },
            user,
            password,
        ))
    }

    /// The primary's address: the one a majority of the sentinels give (asked all at once,
    /// answering as soon as a majority agree), else the most common answer (the first-listed
    /// sentinel's on a tie); every sentinel's failure named when none answers.
    pub async fn primary(&self, timeout: Duration) -> Result<(String, u16), String> {
        {
            let b = self.backoff.lock().expect("backoff lock");
            if let Some(until) = b.until.filter(|u| *u > std::time::Instant::now()) {
                let left = until.saturating_duration_since(std::time::Instant::now());
                return Err(format!(
                    "{} (asking again in {} ms)",
                    b.why,
                    left.as_millis().max(1)
                ));
            }
        }
        let got = self.ask_all(timeout).await;
        let mut b = self.backoff.lock().expect("backoff lock");
        match &got {
            Ok(_) => {
                b.until = None;
                b.wait = Duration::ZERO;
            }
            Err(why) => {
                b.wait = (b.wait * 2).clamp(FIRST_WAIT, LONGEST_WAIT);
                b.until = Some(std::time::Instant::now() + b.wait);
                b.why = why.clone();
            }
        }
        got
    }

    async fn ask_all(&self, timeout: Duration) -> Result<(String, u16), String> {
        use futures::StreamExt;
        let mut asks: futures::stream::FuturesUnordered<_> = self
            .addrs
            .iter()
            .enumerate()
            .map(|(i, (host, port))| async move {
                (i, host, *port, self.ask(host, *port, timeout).await)
            })
            .collect();
        let majority = self.addrs.len() / 2 + 1;
        let mut answers: Vec<(usize, (String, u16))> = Vec::new();
        let mut why = Vec::new();
        while let Some((i, host, port, got)) = asks.next().await {
            match got {
                Ok(addr) => {
                    answers.push((i, addr.clone()));
                    if answers.iter().filter(|(_, a)| *a == addr).count() >= majority {
                        return Ok(addr);
                    }
                }
                Err(e) => why.push((i, format!("{host}:{port}: {e}"))),
            }
        }
        match choose(&answers) {
            Some(addr) => {
                let distinct: std::collections::BTreeSet<_> =
                    answers.iter().map(|(_, a)| a).collect();
                let now = std::time::Instant::now();
                let due = {
                    let mut b = self.backoff.lock().expect("backoff lock");
                    let due = b.warned.is_none_or(|w| now.duration_since(w) >= WARN_EVERY);
                    if due && distinct.len() > 1 {
                        b.warned = Some(now);
                    }
                    due
                };
                if due && distinct.len() > 1 {
                    let said: Vec<String> = answers
                        .iter()
                        .map(|(i, (h, p))| {
                            let (sh, sp) = &self.addrs[*i];
                            format!("{sh}:{sp} says {h}:{p}")
                        })
                        .collect();
                    tracing::warn!(
                        master = %self.master,
                        "sentinels disagree on the primary ({}); using {}:{}",
                        said.join(", "),
                        addr.0,
                        addr.1
                    );
                }
                Ok(addr)
            }
            None => {
                why.sort();
                let why: Vec<String> = why.into_iter().map(|(_, w)| w).collect();
                Err(format!(
                    "no sentinel gave the primary of '{}' ({})",
                    self.master,
                    why.join("; ")
                ))
            }
        }
    }

    async fn ask(&self, host: &str, port: u16, timeout: Duration) -> Result<(String, u16), String> {
        let tcp = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port)))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let stream: crate::upstream::Stream = match &self.tls {
            None => Box::new(tcp),
            Some(connector) => {
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| e.to_string())?;
                let tls = tokio::time::timeout(timeout, connector.connect(name, tcp))
                    .await
                    .map_err(|_| "TLS handshake timed out".to_string())?
                    .map_err(|e| format!("TLS: {e}"))?;
                Box::new(tls)
            }
        };
        let mut link = Link::new(stream, BytesMut::new(), timeout);
        let args =
            |a: &[&str]| -> Vec<Vec<u8>> { a.iter().map(|s| s.as_bytes().to_vec()).collect() };
        if let Some((user, password)) = &self.auth {
            let auth = match user {
                Some(u) => args(&["AUTH", u, password]),
                None => args(&["AUTH", password]),
            };
            let v = link.call1(auth).await.map_err(|e| e.to_string())?;
            if let Value::ServerError(e) = &v {
                return Err(format!("AUTH: {}", e.details().unwrap_or(e.code())));
            }
        }
        let v = link
            .call1(args(&["SENTINEL", "get-master-addr-by-name", &self.master]))
            .await
            .map_err(|e| e.to_string())?;
        if let Value::ServerError(e) = &v {
            return Err(match e.details() {
                Some(d) => format!("{} {d}", e.code()),
                None => e.code().to_string(),
            });
        }
        let a = array(&v);
        match (a.first().and_then(text), a.get(1).and_then(text)) {
            (Some(h), Some(p)) => Ok((
                h,
                p.parse()
                    .map_err(|_| format!("answered a bad port '{p}'"))?,
            )),
            _ => Err("does not know this master".into()),
        }
    }

    pub fn describe(&self) -> String {
        let list: Vec<String> = self.addrs.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        format!("sentinel master '{}' via {}", self.master, list.join(","))
    }
}

/// The most common answer; on a tie, the one the first-listed sentinel gave.
fn choose(answers: &[(usize, (String, u16))]) -> Option<(String, u16)> {
    let count = |a: &(String, u16)| answers.iter().filter(|(_, b)| b == a).count();
    let best = answers.iter().map(|(_, a)| count(a)).max()?;
    answers
        .iter()
        .filter(|(_, a)| count(a) == best)
        .min_by_key(|(i, _)| *i)
        .map(|(_, a)| a.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_common_answer_wins_and_a_tie_goes_to_the_first_listed() {
        let a = ("10.0.0.1".to_string(), 6379);
        let b = ("10.0.0.2".to_string(), 6379);
        assert_eq!(choose(&[]), None);
        assert_eq!(
            choose(&[(0, a.clone()), (2, b.clone()), (1, b.clone())]),
            Some(b.clone())
        );
        assert_eq!(choose(&[(1, b.clone()), (0, a.clone())]), Some(a));
    }

    #[test]
    fn parses_hosts_and_master() {
        let (s, user, pass) =
            Sentinels::parse("redis+sentinel://:se%40cret@a:26379,[::1]:5000,c/mymaster").unwrap();
        assert_eq!((user, pass.as_deref()), (None, Some("se@cret")));
        assert_eq!(
            s.addrs,
            vec![
                ("a".to_string(), 26379),
                ("::1".to_string(), 5000),
                ("c".to_string(), 26379)
            ]
        );
        assert_eq!(s.master, "mymaster");
        for bad in [
            "redis+sentinel://a:1",
            "redis+sentinel://a:1/",
            "redis+sentinel:///m",
            "redis+sentinel://a:x/m",
        ] {
            assert!(Sentinels::parse(bad).is_err(), "{bad}");
        }
    }
}
