//! Reply scanning: where one upstream reply ends, without decoding it.
//!
//! Handles every RESP2 and RESP3 type Redis sends, RESP2 nulls (`$-1`, `*-1`) included, and RESP3
//! attributes (`|`), which belong to the reply that follows them. Iterative, so deep nesting cannot
//! overflow the stack.

/// The upstream sent something that is not RESP.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("upstream sent an invalid reply: {0}")]
pub struct ScanError(pub String);

/// Scan the reply at the front of `buf`: `Ok(Some((len, is_push)))` when complete, `Ok(None)` when
/// more bytes are needed. Stateless convenience over [`Scanner`].
pub fn scan_reply(buf: &[u8]) -> Result<Option<(usize, bool)>, ScanError> {
    Scanner::default().scan(buf)
}

/// A resumable scan of the reply at the front of a growing buffer: a large reply arriving in many
/// reads is walked once, not once per read.
#[derive(Debug, Default, Clone)]
pub struct Scanner {
    /// Offset of the first element not yet walked.
    pos: usize,
    /// Elements still to walk (0: not started).
    pending: u64,
}

impl Scanner {
    /// Continue scanning the front reply of `buf`; after `Some`, the scanner is reset for the next one.
    pub fn scan(&mut self, buf: &[u8]) -> Result<Option<(usize, bool)>, ScanError> {
        if buf.is_empty() {
            return Ok(None);
        }
        if self.pending == 0 {
            self.pos = 0;
            self.pending = 1;
        }
        while self.pending > 0 {
            match element(buf, self.pos)? {
                None => return Ok(None),
                Some((next, children)) => {
                    self.pos = next;
                    self.pending = self.pending - 1 + children;
                }
            }
        }
        let len = self.pos;
        self.pos = 0;
        Ok(Some((len, buf[0] == b'>')))
    }
}

/// One element at `pos`: the offset after it (its own bytes only) and how many children follow it.
fn element(buf: &[u8], pos: usize) -> Result<Option<(usize, u64)>, ScanError> {
    if pos >= buf.len() {
        return Ok(None);
    }
    let kind = buf[pos];
    // The header starts after the type byte (which may itself be anything, '\r' included).
    let Some(cr) = buf[pos + 1..]
        .iter()
        .position(|&b| b == b'\r')
        .map(|i| pos + 1 + i)
    else {
        return Ok(None);
    };
    if cr + 1 >= buf.len() {
        return Ok(None);
    }
    let header = &buf[pos + 1..cr];
    let mut next = cr + 2;
    let children = match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => 0,
        b'$' | b'!' | b'=' => {
            let n = int(header)?;
            if n >= 0 {
                next = usize::try_from(n)
                    .ok()
                    .and_then(|n| next.checked_add(n)?.checked_add(2))
                    .ok_or_else(|| ScanError(format!("bulk length {n} out of range")))?;
                if next > buf.len() {
                    return Ok(None);
                }
            }
            0
        }
        b'*' | b'~' | b'>' => int(header)?.max(0) as u64,
        b'%' => 2 * count(header)?,
        // An attribute map is followed by the reply it describes.
        b'|' => 2 * count(header)? + 1,
        other => return Err(ScanError(format!("unexpected type byte 0x{other:02x}"))),
    };
    Ok(Some((next, children)))
}

fn int(header: &[u8]) -> Result<i64, ScanError> {
    std::str::from_utf8(header)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| ScanError(format!("bad length {:?}", String::from_utf8_lossy(header))))
}

fn count(header: &[u8]) -> Result<u64, ScanError> {
    let n = int(header)?;
    u64::try_from(n).map_err(|_| ScanError(format!("negative map length {n}")))
}

/// The elements of an array (or set) reply, each as its own complete frame.
pub fn elements(f: &[u8]) -> Option<Vec<&[u8]>> {
    if !matches!(f.first(), Some(b'*') | Some(b'~')) {
        return None;
    }
    let eol = f.windows(2).position(|w| w == b"\r\n")?;
    let count: i64 = std::str::from_utf8(&f[1..eol]).ok()?.parse().ok()?;
    let mut pos = eol + 2;
    let mut out = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count.max(0) {
        let (len, _) = scan_reply(&f[pos..]).ok()??;
        out.push(&f[pos..pos + len]);
        pos += len;
    }
    Some(out)
}

/// A RESP3 push answering (P|S)UNSUBSCRIBE: `>3` whose first element names the command.
pub fn is_unsubscribe_push(frame: &[u8]) -> bool {
    [
        &b"unsubscribe\r\n"[..],
        b"punsubscribe\r\n",
        b"sunsubscribe\r\n",
    ]
    .iter()
    .any(|kind| {
        frame.starts_with(b">3\r\n$")
            && frame
                .get(4..)
                .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
                .is_some_and(|nl| frame[4 + nl + 1..].starts_with(kind))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_and_partial() {
        let cases: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":1\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"$3\r\nabc\r\n",
            b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
            b"%1\r\n+a\r\n,1.5\r\n",
            b"|1\r\n+ttl\r\n:3\r\n$1\r\nx\r\n",
            b"=8\r\ntxt:abcd\r\n",
            b"*0\r\n",
        ];
        for c in cases {
            assert_eq!(
                scan_reply(c),
                Ok(Some((c.len(), false))),
                "{:?}",
                String::from_utf8_lossy(c)
            );
            for cut in 0..c.len() {
                assert_eq!(scan_reply(&c[..cut]), Ok(None));
            }
        }
        assert_eq!(
            scan_reply(b">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n+OK\r\n"),
            Ok(Some((24, true)))
        );
        assert!(scan_reply(b"?\r\n").is_err());
        // Found by cargo fuzz (target framer): a '\r' type byte, and a bulk length near i64::MAX.
        assert!(scan_reply(b"\r\x80\x00\x9b").is_ok());
        assert!(scan_reply(b"\r\r\n").is_err());
        assert_eq!(scan_reply(b"$9223372036854775807\r\nab"), Ok(None));
        assert!(scan_reply(b"$18446744073709551615\r\nab").is_err());
        // Resumable: fed byte by byte, it completes exactly once at the end.
        let c = b"*3\r\n$3\r\nabc\r\n*1\r\n:1\r\n_\r\n";
        let mut s = Scanner::default();
        for cut in 1..c.len() {
            assert_eq!(s.scan(&c[..cut]), Ok(None));
        }
        assert_eq!(s.scan(c), Ok(Some((c.len(), false))));
    }
}
