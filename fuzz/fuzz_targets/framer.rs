//! The request framer, reply scanner and reply decoder on arbitrary bytes: never panic, never
//! claim more bytes than given, always make progress; the decoder agrees with the `redis` crate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memproxy::resp::{parse_request, scan_reply, value, Parsed};

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    while at < data.len() {
        match parse_request(&data[at..]) {
            Parsed::Request(r) => {
                assert!(r.len > 0 && at + r.len <= data.len());
                for i in 0..r.argc() {
                    let _ = r.arg(&data[at..], i);
                }
                at += r.len;
            }
            Parsed::Skip(n) => {
                assert!(n > 0);
                at += n;
            }
            Parsed::Incomplete(need) => {
                assert!(need > data.len() - at);
                break;
            }
            Parsed::Invalid(_) => break,
        }
    }
    if let Ok(Some((len, _))) = scan_reply(data) {
        assert!(len <= data.len());
        if let Some(ours) = value::decode(&data[..len]) {
            let theirs = redis::parse_redis_value(&data[..len]).expect("the redis crate reads it too");
            assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
        }
    }
});
