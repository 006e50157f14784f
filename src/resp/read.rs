//! Reading `redis::Value`s that Lua scripts and FT.* commands return (RESP2 shapes).

use redis::Value;

pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Double(d) => Some(d.to_string()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

pub fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        other => text(other).and_then(|s| s.parse().ok()),
    }
}

pub fn float(v: &Value) -> Option<f64> {
    match v {
        Value::Double(d) => Some(*d),
        Value::Int(i) => Some(*i as f64),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        other => text(other).and_then(|s| s.parse().ok()),
    }
}

pub fn array(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) | Value::Set(a) => a,
        _ => &[],
    }
}

/// A map reply as a flat `name, value, …` list (RESP3 maps and RESP2 arrays alike).
pub fn flat(v: &Value) -> Vec<Value> {
    match v {
        Value::Map(m) => m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
        other => array(other).to_vec(),
    }
}

/// Whether `v` is the string `name` (compared without building a `String`).
fn is_name(v: &Value, name: &str) -> bool {
    match v {
        Value::BulkString(b) => b == name.as_bytes(),
        Value::SimpleString(s) => s == name,
        Value::VerbatimString { text, .. } => text == name,
        _ => false,
    }
}

/// Value of `name` in a flat `name, value, …` array.
pub fn field<'a>(flat: &'a [Value], name: &str) -> Option<&'a Value> {
    flat.chunks(2)
        .find(|p| p.len() == 2 && is_name(&p[0], name))
        .map(|p| &p[1])
}

/// Seconds left from a PTTL reply: -1 none, -2 missing, else rounded up.
pub fn ttl_from_pttl(pttl: i64) -> i64 {
    if pttl < 0 {
        pttl
    } else {
        (pttl + 999) / 1000
    }
}
