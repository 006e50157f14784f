//! Hash slots as Redis Cluster computes them: CRC16 (XMODEM) of the key's hash tag, mod 16384.

/// Slots in a Redis Cluster.
pub const SLOTS: usize = 16384;

/// The part of `key` that is hashed: the bytes between the first `{` and the first `}` after
/// it, when that is not empty; else the whole key (Redis Cluster's rule).
pub fn hashed_part(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The hash slot of `key`.
pub fn slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hashed_part(key)) % SLOTS as u16
}

/// The hash tag memproxy puts in a user's keys in cluster mode: the user name itself when it is
/// a usable tag (not empty, no `{` or `}`), else `~` and the name in hex. Every key of one user
/// carries the same tag, so they share one slot.
pub fn user_tag(user: &str) -> String {
    if !user.is_empty() && !user.contains(['{', '}']) && !user.starts_with('~') {
        user.to_string()
    } else {
        let hex: String = user.bytes().map(|b| format!("{b:02x}")).collect();
        format!("~{hex}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on Redis 8.2.
        assert_eq!(slot(b"{alice}"), 749);
        assert_eq!(slot(b"agent:mem:{alice}:1"), 749);
        assert_eq!(slot(b"mem_idx{3}"), 1584);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"123456789"), 0x31c3);
        // An empty tag hashes the whole key; only the first {...} counts.
        assert_eq!(
            slot(b"a{}b"),
            crc16::State::<crc16::XMODEM>::calculate(b"a{}b") % 16384
        );
        assert_eq!(slot(b"{a}{b}"), slot(b"a"));
        assert_eq!(slot(b"x{a}b}"), slot(b"a"));
    }

    #[test]
    fn user_tags_are_never_empty_or_broken() {
        assert_eq!(user_tag("alice"), "alice");
        assert_eq!(user_tag(""), "~");
        assert_eq!(user_tag("a}b"), "~617d62");
        assert_eq!(user_tag("~x"), "~7e78");
        assert_eq!(
            hashed_part(format!("k:{{{}}}:1", user_tag("a{b")).as_bytes()),
            b"~617b62"
        );
    }
}
