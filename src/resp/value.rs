//! Decoding one complete upstream reply into a `redis::Value`, for the replies memproxy reads
//! itself (its scripts' results, FT.* and the few plain commands of MEM.*).
//!
//! The frame has already been delimited by [`super::Scanner`]; this is a single pass with one
//! allocation per string and per array. `redis::parse_redis_value` (a `combine` parser) spent a
//! third of the proxy's CPU on a MEM.RECALL's reply of ~700 values. Types whose `Value` cannot be
//! built outside the `redis` crate (errors) or that memproxy never reads on its own connection
//! (verbatim strings, big numbers, pushes, attributes) make [`decode`] answer `None`, and the
//! caller falls back to the `redis` crate's parser for that frame.

use redis::Value;

/// Deeper nesting than this is left to the fallback parser (which refuses it).
const MAX_DEPTH: usize = 100;

/// Decode the complete frame `frame` (exactly one reply); `None` when the fallback must be used.
pub fn decode(frame: &[u8]) -> Option<Value> {
    let mut pos = 0;
    let v = element(frame, &mut pos, 0)?;
    (pos == frame.len()).then_some(v)
}

/// The header line at `*pos` (after the type byte), as text; moves past its CRLF.
fn line<'a>(buf: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let start = *pos + 1;
    let rest = buf.get(start..)?;
    let cr = memchr(b'\r', rest)?;
    if rest.get(cr + 1) != Some(&b'\n') {
        return None;
    }
    *pos = start + cr + 2;
    Some(&rest[..cr])
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|b| *b == needle)
}

fn number(line: &[u8]) -> Option<i64> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

/// `n` bytes of payload at `*pos` followed by CRLF.
fn payload<'a>(buf: &'a [u8], pos: &mut usize, n: usize) -> Option<&'a [u8]> {
    let end = pos.checked_add(n)?;
    let body = buf.get(*pos..end)?;
    if buf.get(end..end + 2)? != b"\r\n" {
        return None;
    }
    *pos = end + 2;
    Some(body)
}

fn elements(buf: &[u8], pos: &mut usize, n: usize, depth: usize) -> Option<Vec<Value>> {
    // The length comes from the wire: never reserve more than the bytes left could hold.
    let mut out = Vec::with_capacity(n.min(buf.len().saturating_sub(*pos) / 3));
    for _ in 0..n {
        out.push(element(buf, pos, depth + 1)?);
    }
    Some(out)
}

fn element(buf: &[u8], pos: &mut usize, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    let kind = *buf.get(*pos)?;
    let head = line(buf, pos)?;
    Some(match kind {
        b'+' => {
            let s = std::str::from_utf8(head).ok()?;
            if s == "OK" {
                Value::Okay
            } else {
                Value::SimpleString(s.to_string())
            }
        }
        b':' => Value::Int(number(head)?),
        b'$' => match number(head)? {
            n if n < 0 => Value::Nil,
            n => Value::BulkString(payload(buf, pos, usize::try_from(n).ok()?)?.to_vec()),
        },
        b'*' | b'~' => match number(head)? {
            n if n < 0 => Value::Nil,
            n => {
                let items = elements(buf, pos, usize::try_from(n).ok()?, depth)?;
                if kind == b'*' {
                    Value::Array(items)
                } else {
                    Value::Set(items)
                }
            }
        },
        b'%' => {
            let n = usize::try_from(number(head)?).ok()?;
            let mut flat = elements(buf, pos, n.checked_mul(2)?, depth)?.into_iter();
            let mut pairs = Vec::with_capacity(n);
            while let (Some(k), Some(v)) = (flat.next(), flat.next()) {
                pairs.push((k, v));
            }
            Value::Map(pairs)
        }
        // Redis sends `_\r\n`; any text is read as the `redis` crate reads it (UTF-8 or refused).
        b'_' => {
            std::str::from_utf8(head).ok()?;
            Value::Nil
        }
        b',' => Value::Double(std::str::from_utf8(head).ok()?.trim().parse().ok()?),
        b'#' => match head {
            b"t" => Value::Boolean(true),
            b"f" => Value::Boolean(false),
            _ => return None,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same values as the `redis` crate's parser, for every type decoded here.
    #[test]
    fn decodes_as_the_redis_crate_does() {
        let frames: [&[u8]; 14] = [
            b"+OK\r\n",
            b"+PONG\r\n",
            b":-42\r\n",
            b"$5\r\nhe\r\no\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n_\r\n$2\r\nbc\r\n",
            b"%2\r\n$1\r\nk\r\n:1\r\n+x\r\n,1.5\r\n",
            b"~2\r\n#t\r\n#f\r\n",
            b",-0.25\r\n",
            b",inf\r\n",
            b"_\r\n",
        ];
        for f in frames {
            let ours = decode(f).unwrap_or_else(|| panic!("{:?}", String::from_utf8_lossy(f)));
            let theirs = redis::parse_redis_value(f).unwrap();
            assert_eq!(
                format!("{ours:?}"),
                format!("{theirs:?}"),
                "{:?}",
                String::from_utf8_lossy(f)
            );
        }
    }

    #[test]
    fn leaves_errors_and_broken_frames_to_the_fallback() {
        for f in [
            &b"-ERR no\r\n"[..],
            b"*2\r\n:1\r\n-NOPERM x\r\n",
            b"$3\r\nab\r\n",
            b"$2\r\nabc\r\n",
            b":1\r\n:2\r\n",
            b"*1\r\n",
            b"#x\r\n",
            b"=7\r\ntxt:abc\r\n",
        ] {
            assert!(decode(f).is_none(), "{:?}", String::from_utf8_lossy(f));
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 5) + ":1\r\n";
        assert!(decode(deep.as_bytes()).is_none());
    }

    /// Random frames built from reply pieces: no panic, and whatever is decoded is what the
    /// `redis` crate reads (fuzz/fuzz_targets/framer.rs runs the same check coverage-guided).
    #[test]
    fn random_frames_decode_as_the_redis_crate_does_or_fall_back() {
        let pieces: [&[u8]; 24] = [
            b"*",
            b"%",
            b"~",
            b"$",
            b":",
            b"+",
            b",",
            b"#",
            b"_",
            b"-",
            b"\r\n",
            b"\r",
            b"1",
            b"2",
            b"0",
            b"-1",
            b"3",
            b"OK",
            b"t",
            b"f",
            b"1.5",
            b"ab",
            b"\xff",
            b"99999999999",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut decoded = 0;
        for _ in 0..200_000 {
            let mut f = Vec::new();
            for _ in 0..(rnd() % 16) {
                f.extend_from_slice(pieces[(rnd() % pieces.len() as u64) as usize]);
            }
            let Ok(Some((len, _))) = super::super::scan_reply(&f) else {
                continue;
            };
            if let Some(ours) = decode(&f[..len]) {
                let theirs = redis::parse_redis_value(&f[..len]).unwrap();
                assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{f:?}");
                decoded += 1;
            }
        }
        assert!(decoded > 1000, "only {decoded} frames decoded");
    }
}
