//! The MEM.* argument parser on arbitrary argument lists: never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memproxy::mem::Command;

fuzz_target!(|data: &[u8]| {
    // Arguments separated by 0xff; the first picks the verb.
    let mut parts = data.split(|b| *b == 0xff).map(|p| p.to_vec());
    let verbs: [&[u8]; 10] = [b"MEM.REMEMBER", b"MEM.RECALL", b"MEM.TURN", b"MEM.SESSION", b"MEM.FORGET", b"MEM.LIST", b"MEM.EVENTS", b"MEM.EMBED", b"MEM.INFO", b"mem.x"];
    let verb = parts.next().and_then(|p| p.first().copied()).unwrap_or(0) as usize % verbs.len();
    let mut args = vec![verbs[verb].to_vec()];
    args.extend(parts);
    let _ = Command::parse(args, &memproxy::Config::default());
});
