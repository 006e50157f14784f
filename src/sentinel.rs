//! Redis Sentinel: where the primary of a monitored master is now.
//!
//! `redis+sentinel://host:port[,host:port…]/master-name` names sentinels, not Redis. Every new
//! upstream connection (a client's, memproxy's own) asks them, in order, `SENTINEL
//! get-master-addr-by-name`, and connects to the answer. A failover is followed without any
//! state here: Sentinel disconnects the demoted primary's clients (`CLIENT KILL TYPE normal`) and a
//! killed primary drops them, so memproxy closes those clients as for any upstream loss, and their
//! reconnections, asking again, reach the promoted replica.

use std::time::Duration;

use bytes::BytesMut;
use redis::Value;

use crate::store::value::{array, text};
use crate::upstream::{Link, ReplyMode};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentinels {
    pub addrs: Vec<(String, u16)>,
    pub master: String,
}

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
            },
            user,
            password,
        ))
    }

    /// The primary's address, from the first sentinel that knows the master; every sentinel's
    /// failure named when none does.
    pub async fn primary(&self, timeout: Duration) -> Result<(String, u16), String> {
        let mut why = Vec::new();
        for (host, port) in &self.addrs {
            match self.ask(host, *port, timeout).await {
                Ok(addr) => return Ok(addr),
                Err(e) => why.push(format!("{host}:{port}: {e}")),
            }
        }
        Err(format!(
            "no sentinel gave the primary of '{}' ({})",
            self.master,
            why.join("; ")
        ))
    }

    async fn ask(&self, host: &str, port: u16, timeout: Duration) -> Result<(String, u16), String> {
        let tcp = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port)))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let mut link = Link::new(Box::new(tcp), BytesMut::new(), ReplyMode::On, timeout);
        let cmd: Vec<Vec<u8>> = ["SENTINEL", "get-master-addr-by-name", &self.master]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let v = link.call1(cmd).await.map_err(|e| e.to_string())?;
        if let Value::ServerError(e) = &v {
            return Err(format!("{e:?}"));
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

#[cfg(test)]
mod tests {
    use super::*;

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
