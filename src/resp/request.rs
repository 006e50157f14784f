//! Request framing: where each client request ends, and where its arguments are.
//!
//! Follows Redis's own reader (`processMultibulkBuffer` / `processInlineBuffer`): a request is a
//! multibulk (`*<n>\r\n` then `n` bulk strings) or an inline line split on blanks with quotes.
//! Anything Redis would reject as a protocol error is reported as [`Parsed::Invalid`] so the caller
//! can hand the bytes to the upstream and relay Redis's own error word for word.

use std::ops::Range;

/// Redis's `PROTO_INLINE_MAX_SIZE`: an inline request (or a multibulk header line) longer than this
/// without a newline is a protocol error.
pub const INLINE_MAX: usize = 64 * 1024;
/// Redis's default `proto-max-bulk-len`.
pub const BULK_MAX: i64 = 512 * 1024 * 1024;
/// Redis's limit on the number of arguments of one multibulk request.
pub const MULTIBULK_MAX: i64 = 1024 * 1024;

/// One complete request in the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Bytes the request occupies at the front of the buffer.
    pub len: usize,
    /// Argument byte ranges into the buffer (multibulk), or owned arguments (inline, after
    /// unquoting).
    pub args: Args,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    Ranges(Vec<Range<usize>>),
    Owned(Vec<Vec<u8>>),
}

impl Request {
    pub fn argc(&self) -> usize {
        match &self.args {
            Args::Ranges(r) => r.len(),
            Args::Owned(o) => o.len(),
        }
    }

    /// Argument `i` as bytes, given the buffer the request was parsed from.
    pub fn arg<'a>(&'a self, buf: &'a [u8], i: usize) -> Option<&'a [u8]> {
        match &self.args {
            Args::Ranges(r) => r.get(i).map(|r| &buf[r.clone()]),
            Args::Owned(o) => o.get(i).map(|v| v.as_slice()),
        }
    }

    /// All arguments copied out (only MEM.* requests need this).
    pub fn owned_args(&self, buf: &[u8]) -> Vec<Vec<u8>> {
        match &self.args {
            Args::Ranges(r) => r.iter().map(|r| buf[r.clone()].to_vec()).collect(),
            Args::Owned(o) => o.clone(),
        }
    }
}

/// Outcome of looking at the front of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A complete request.
    Request(Request),
    /// Bytes Redis consumes without replying: an empty inline line, or `*0` / `*-1`.
    Skip(usize),
    /// Not enough bytes yet; at least this many are needed in total before trying again.
    Incomplete(usize),
    /// Redis would answer `-ERR Protocol error: <reason>` and close the connection.
    Invalid(String),
}

/// Parse the request at the front of `buf`.
pub fn parse_request(buf: &[u8]) -> Parsed {
    match buf.first() {
        None => Parsed::Incomplete(1),
        Some(b'*') => parse_multibulk(buf),
        Some(_) => parse_inline(buf),
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    // Redis looks for '\r' and expects '\n' after it.
    memchr(b'\r', &buf[from..]).map(|i| from + i)
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

/// Parse a signed decimal as Redis's `string2ll` does (no '+', no leading zeros except "0").
fn parse_int(digits: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(digits).ok()?;
    if s.is_empty()
        || s.starts_with('+')
        || (s.len() > 1 && s.starts_with('0'))
        || s.starts_with("-0")
    {
        return None;
    }
    s.parse().ok()
}

fn parse_multibulk(buf: &[u8]) -> Parsed {
    Framer::default().parse(buf)
}

/// A multibulk request parsed part of the way: resumed where it stopped, so a request that
/// arrives in many reads is walked once (parsing stays linear in its size).
#[derive(Debug, Default)]
struct Partial {
    count: i64,
    pos: usize,
    args: Vec<Range<usize>>,
}

/// Request framing over a growing buffer whose front is the request being parsed.
#[derive(Debug, Default)]
pub struct Framer {
    partial: Option<Partial>,
}

impl Framer {
    /// Parse the request at the front of `buf` (the same front as the previous call, grown, until
    /// a complete request, a skip or an error is returned).
    pub fn parse(&mut self, buf: &[u8]) -> Parsed {
        let mut p = match self.partial.take() {
            Some(p) => p,
            None => {
                if buf.first() != Some(&b'*') {
                    return parse_request(buf);
                }
                let Some(eol) = find_crlf(buf, 1) else {
                    return if buf.len() > INLINE_MAX {
                        Parsed::Invalid("too big mbulk count string".into())
                    } else {
                        Parsed::Incomplete(buf.len() + 1)
                    };
                };
                let count = match parse_int(&buf[1..eol]) {
                    Some(n) if n <= MULTIBULK_MAX => n,
                    _ => return Parsed::Invalid("invalid multibulk length".into()),
                };
                let pos = eol + 2;
                if count <= 0 {
                    // Redis skips "*0" and "*-1" silently.
                    return if buf.len() < pos {
                        Parsed::Incomplete(pos)
                    } else {
                        Parsed::Skip(pos)
                    };
                }
                Partial {
                    count,
                    pos,
                    args: Vec::with_capacity(count.min(1024) as usize),
                }
            }
        };
        while (p.args.len() as i64) < p.count {
            let pos = p.pos;
            if pos >= buf.len() {
                let need = pos + 1;
                self.partial = Some(p);
                return Parsed::Incomplete(need);
            }
            if buf[pos] != b'$' {
                return Parsed::Invalid(format!("expected '$', got '{}'", buf[pos] as char));
            }
            let Some(eol) = find_crlf(buf, pos + 1) else {
                if buf.len() - pos > INLINE_MAX {
                    return Parsed::Invalid("too big bulk count string".into());
                }
                let need = buf.len() + 1;
                self.partial = Some(p);
                return Parsed::Incomplete(need);
            };
            let len = match parse_int(&buf[pos + 1..eol]) {
                Some(n) if (0..=BULK_MAX).contains(&n) => n as usize,
                _ => return Parsed::Invalid("invalid bulk length".into()),
            };
            let start = eol + 2;
            let end = start + len;
            if buf.len() < end + 2 {
                self.partial = Some(p);
                return Parsed::Incomplete(end + 2);
            }
            p.args.push(start..end);
            p.pos = end + 2;
        }
        Parsed::Request(Request {
            len: p.pos,
            args: Args::Ranges(p.args),
        })
    }

    /// Arguments announced by the request being parsed (0 when none is under way).
    pub fn announced_args(&self) -> i64 {
        self.partial.as_ref().map_or(0, |p| p.count)
    }
}

fn parse_inline(buf: &[u8]) -> Parsed {
    let Some(nl) = memchr(b'\n', buf) else {
        return if buf.len() > INLINE_MAX {
            Parsed::Invalid("too big inline request".into())
        } else {
            Parsed::Incomplete(buf.len() + 1)
        };
    };
    let mut line = &buf[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    match split_args(line) {
        None => Parsed::Invalid("unbalanced quotes in request".into()),
        Some(args) if args.is_empty() => Parsed::Skip(nl + 1),
        Some(args) => Parsed::Request(Request {
            len: nl + 1,
            args: Args::Owned(args),
        }),
    }
}

/// Redis's `sdssplitargs`: blanks separate arguments; "double quotes" take \n \r \t \b \a \\ \" and
/// \xHH escapes; 'single quotes' take \' only. A closing quote must be followed by a blank.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= n {
            return Some(out);
        }
        let mut cur = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            if inq {
                if i >= n {
                    return None;
                }
                if line[i] == b'\\'
                    && i + 3 < n
                    && line[i + 1] == b'x'
                    && is_hex(line[i + 2])
                    && is_hex(line[i + 3])
                {
                    cur.push(hex(line[i + 2]) * 16 + hex(line[i + 3]));
                    i += 3;
                } else if line[i] == b'\\' && i + 1 < n {
                    i += 1;
                    cur.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        c => c,
                    });
                } else if line[i] == b'"' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(line[i]);
                }
            } else if insq {
                if i >= n {
                    return None;
                }
                if line[i] == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    i += 1;
                    cur.push(b'\'');
                } else if line[i] == b'\'' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(line[i]);
                }
            } else {
                if i >= n {
                    break;
                }
                match line[i] {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        i += 1;
                        break;
                    }
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    c => cur.push(c),
                }
            }
            i += 1;
        }
        out.push(cur);
    }
}

fn is_hex(c: u8) -> bool {
    c.is_ascii_hexdigit()
}

fn hex(c: u8) -> u8 {
    (c as char).to_digit(16).unwrap_or(0) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(buf: &[u8]) -> Vec<Vec<u8>> {
        match parse_request(buf) {
            Parsed::Request(r) => r.owned_args(buf),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn multibulk_and_partial() {
        let full = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        assert_eq!(args(full), vec![b"GET".to_vec(), b"k".to_vec()]);
        for cut in 1..full.len() {
            assert!(
                matches!(parse_request(&full[..cut]), Parsed::Incomplete(n) if n > cut),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn resumed_parse_equals_whole_parse() {
        let mut full = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n".to_vec();
        full.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        let whole = parse_request(&full);
        let mut f = Framer::default();
        let mut got = None;
        for cut in 1..=full.len() {
            match f.parse(&full[..cut]) {
                Parsed::Incomplete(n) => assert!(n > cut, "cut {cut}"),
                other => {
                    got = Some(other);
                    break;
                }
            }
        }
        assert_eq!(got.unwrap(), whole);
    }

    #[test]
    fn inline_quotes_and_empty() {
        assert_eq!(args(b"PING\r\n"), vec![b"PING".to_vec()]);
        assert_eq!(
            args(b"set k \"a b\\x41\" 'c\\'d'\n"),
            vec![
                b"set".to_vec(),
                b"k".to_vec(),
                b"a bA".to_vec(),
                b"c'd".to_vec()
            ]
        );
        assert_eq!(parse_request(b"\r\n"), Parsed::Skip(2));
        assert_eq!(parse_request(b"*0\r\n"), Parsed::Skip(4));
        assert!(matches!(parse_request(b"set \"a\n"), Parsed::Invalid(_)));
    }

    #[test]
    fn limits_are_protocol_errors() {
        assert!(
            matches!(parse_request(b"*1\r\n$2000000000\r\n"), Parsed::Invalid(m) if m == "invalid bulk length")
        );
        assert!(
            matches!(parse_request(b"*2000000\r\n"), Parsed::Invalid(m) if m == "invalid multibulk length")
        );
        assert!(
            matches!(parse_request(b"*1\r\nx"), Parsed::Invalid(m) if m == "expected '$', got 'x'")
        );
        assert!(matches!(
            parse_request(&vec![b'a'; INLINE_MAX + 1]),
            Parsed::Invalid(_)
        ));
        assert!(matches!(parse_request(b"*abc\r\n"), Parsed::Invalid(_)));
    }
}
