//! The replies MEM.* commands answer with, encoded for the connection's protocol.
//!
//! Maps keep their field order. Under RESP2 a map is a flat `field, value, …` array (like FT.INFO),
//! a double is a bulk string and nil is `$-1`; under RESP3 they are `%`, `,` and `_`.

use bytes::{BufMut, BytesMut};

/// The protocol a client connection negotiated with HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Status(&'static str),
    /// A full error line without the leading '-', e.g. `ERR wrong number of arguments ...`.
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Double(f64),
    Nil,
    Array(Vec<Reply>),
    Map(Vec<(&'static str, Reply)>),
}

impl Reply {
    pub fn text(s: impl Into<String>) -> Reply {
        Reply::Bulk(s.into().into_bytes())
    }

    pub fn opt_text(s: Option<impl Into<String>>) -> Reply {
        s.map(Reply::text).unwrap_or(Reply::Nil)
    }

    pub fn opt_double(d: Option<f64>) -> Reply {
        d.map(Reply::Double).unwrap_or(Reply::Nil)
    }

    pub fn encode(&self, proto: Protocol, out: &mut BytesMut) {
        match self {
            Reply::Status(s) => line(out, b'+', s.as_bytes()),
            Reply::Error(e) => {
                // An error is one line: newlines would break the framing.
                let clean: String = e
                    .chars()
                    .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
                    .collect();
                line(out, b'-', clean.as_bytes())
            }
            Reply::Int(i) => line(out, b':', i.to_string().as_bytes()),
            Reply::Bulk(b) => bulk(out, b),
            Reply::Double(d) => {
                let s = format_double(*d);
                match proto {
                    Protocol::Resp3 => line(out, b',', s.as_bytes()),
                    Protocol::Resp2 => bulk(out, s.as_bytes()),
                }
            }
            Reply::Nil => match proto {
                Protocol::Resp3 => out.put_slice(b"_\r\n"),
                Protocol::Resp2 => out.put_slice(b"$-1\r\n"),
            },
            Reply::Array(items) => {
                line(out, b'*', items.len().to_string().as_bytes());
                for i in items {
                    i.encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                match proto {
                    Protocol::Resp3 => line(out, b'%', pairs.len().to_string().as_bytes()),
                    Protocol::Resp2 => line(out, b'*', (pairs.len() * 2).to_string().as_bytes()),
                }
                for (k, v) in pairs {
                    bulk(out, k.as_bytes());
                    v.encode(proto, out);
                }
            }
        }
    }
}

fn line(out: &mut BytesMut, kind: u8, body: &[u8]) {
    out.reserve(body.len() + 3);
    out.put_u8(kind);
    out.put_slice(body);
    out.put_slice(b"\r\n");
}

fn bulk(out: &mut BytesMut, body: &[u8]) {
    line(out, b'$', body.len().to_string().as_bytes());
    out.put_slice(body);
    out.put_slice(b"\r\n");
}

/// Shortest text that reads back as the same double; `inf`, `-inf`, `nan` as Redis writes them.
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        "nan".into()
    } else if d.is_infinite() {
        if d > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        }
    } else {
        format!("{d}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, p: Protocol) -> String {
        let mut b = BytesMut::new();
        r.encode(p, &mut b);
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[test]
    fn map_in_both_protocols() {
        let r = Reply::Map(vec![
            ("id", Reply::text("a")),
            ("distance", Reply::Double(0.25)),
            ("x", Reply::Nil),
        ]);
        assert_eq!(
            enc(&r, Protocol::Resp2),
            "*6\r\n$2\r\nid\r\n$1\r\na\r\n$8\r\ndistance\r\n$4\r\n0.25\r\n$1\r\nx\r\n$-1\r\n"
        );
        assert_eq!(
            enc(&r, Protocol::Resp3),
            "%3\r\n$2\r\nid\r\n$1\r\na\r\n$8\r\ndistance\r\n,0.25\r\n$1\r\nx\r\n_\r\n"
        );
        assert_eq!(
            enc(&Reply::Error("ERR a\nb".into()), Protocol::Resp2),
            "-ERR a b\r\n"
        );
    }
}
