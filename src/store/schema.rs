//! The long-term memory index: its schema, creating it when missing, and checking it when present.
//!
//! An existing index is never dropped or altered. When its prefix, fields, vector type, dimension
//! or metric differ from what memproxy needs, the check says what differs and MEM.* answer that
//! error while ordinary commands keep working.

use redis::Value;

use crate::config::Storage;
use crate::resp::read::{array, field, text};

/// (JSON path, attribute, type) of every non-vector field.
pub const FIELDS: [(&str, &str, &str); 7] = [
    ("$.text", "text", "TEXT"),
    ("$.user", "user", "TAG"),
    ("$.namespace", "namespace", "TAG"),
    ("$.kind", "kind", "TAG"),
    ("$.source_thread", "source_thread", "TAG"),
    ("$.created_ts", "created_ts", "NUMERIC"),
    ("$.hit_count", "hit_count", "NUMERIC"),
];

/// FT.CREATE arguments (after the command name) of an index in `layout`.
///
/// The guide's layout: JSON documents, fields by JSON path, FLOAT32 vectors, numbers SORTABLE.
/// The compact layout: HASH documents with the same field names (identifier = attribute), FLOAT16
/// vectors, and an index that keeps no term offsets or highlighting data (`NOOFFSETS NOHL`: no
/// query memproxy sends uses phrases or highlighting; term frequencies stay, so BM25 is the same)
/// and a sortable copy of `created_ts` only (MEM.LIST sorts by it; a cluster node without the
/// coordinator cannot load a field to sort by).
pub fn create_args(index: &str, prefix: &str, dim: usize, layout: Storage) -> Vec<String> {
    let compact = layout == Storage::Compact;
    let mut a: Vec<String> = [
        index,
        "ON",
        if compact { "HASH" } else { "JSON" },
        "PREFIX",
        "1",
        prefix,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if compact {
        a.extend(["NOOFFSETS".to_string(), "NOHL".to_string()]);
    }
    a.push("SCHEMA".into());
    for (path, name, ty) in FIELDS {
        let id = if compact { name } else { path };
        a.extend([id, "AS", name, ty].iter().map(|s| s.to_string()));
        if ty == "NUMERIC" && (!compact || name == "created_ts") {
            a.push("SORTABLE".into());
        }
        // Scope tags compare exactly ("Alice" is not "alice"); reads check exactly as well, so
        // an index created by the guide without this flag is still safe to share.
        if ty == "TAG" && name != "kind" {
            a.push("CASESENSITIVE".into());
        }
    }
    let windows = if compact { "windows" } else { WINDOWS_PATH };
    let (emb, ty) = if compact {
        ("embedding", "FLOAT16")
    } else {
        ("$.embedding", "FLOAT32")
    };
    for (path, name) in [(emb, "embedding"), (windows, "windows")] {
        a.extend(
            [
                path,
                "AS",
                name,
                "VECTOR",
                "HNSW",
                "6",
                "TYPE",
                ty,
                "DIM",
                &dim.to_string(),
                "DISTANCE_METRIC",
                "COSINE",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
    }
    a
}

/// The later windows of a long text (`$.windows`, an array of vectors; see `embed::windows`),
/// indexed as one multi-value vector field: a KNN on it finds a memory by its nearest window.
/// Optional: an index without it (the guide's) is accepted, and recall then sees first windows only.
pub const WINDOWS_PATH: &str = "$.windows[*]";

/// What the check found in an index memproxy can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The layout, read from the index (JSON: guide; HASH: compact).
    pub layout: Storage,
    /// The index has the optional `windows` field.
    pub windows: bool,
}

/// Compare an FT.INFO reply with what memproxy needs in the layout the index itself has (its key
/// type: JSON is the guide's, HASH the compact one); `Err` lists every difference.
pub fn check(info: &Value, index: &str, prefix: &str, dim: usize) -> Result<Found, String> {
    let info = array(info);
    let mut diffs = Vec::new();
    let def = field(info, "index_definition")
        .map(array)
        .unwrap_or_default();
    let key_type = field(def, "key_type").and_then(text).unwrap_or_default();
    let layout = match key_type.as_str() {
        "JSON" => Storage::Guide,
        "HASH" => Storage::Compact,
        other => {
            diffs.push(format!("key type is {other}, not JSON or HASH"));
            Storage::Guide
        }
    };
    let compact = layout == Storage::Compact;
    let vector_type = if compact { "FLOAT16" } else { "FLOAT32" };
    let prefixes: Vec<String> = field(def, "prefixes")
        .map(array)
        .unwrap_or_default()
        .iter()
        .filter_map(text)
        .collect();
    if prefixes != [prefix] {
        diffs.push(format!("prefixes are {prefixes:?}, not [{prefix:?}]"));
    }
    let attrs: Vec<&[Value]> = field(info, "attributes")
        .map(array)
        .unwrap_or_default()
        .iter()
        .map(array)
        .collect();
    let find = |name: &str| {
        attrs
            .iter()
            .find(|a| field(a, "attribute").and_then(text).as_deref() == Some(name))
            .copied()
    };
    for (path, name, ty) in FIELDS {
        match find(name) {
            None => diffs.push(format!("field {name} is missing")),
            Some(a) => {
                let got = field(a, "type").and_then(text).unwrap_or_default();
                if got != ty {
                    diffs.push(format!("field {name} is {got}, not {ty}"));
                }
                let got_path = field(a, "identifier").and_then(text).unwrap_or_default();
                let want = if compact { name } else { path };
                if got_path != want {
                    diffs.push(format!("field {name} indexes {got_path}, not {want}"));
                }
            }
        }
    }
    let vector = |name: &str, a: &[Value], diffs: &mut Vec<String>| {
        let get = |k: &str| field(a, k).and_then(text).unwrap_or_default();
        if get("type") != "VECTOR" {
            diffs.push(format!("field {name} is {}, not VECTOR", get("type")));
            return;
        }
        if get("dim") != dim.to_string() {
            diffs.push(format!(
                "vector dim of {name} is {}, the model's is {dim}",
                get("dim")
            ));
        }
        if !get("distance_metric").eq_ignore_ascii_case("COSINE") {
            diffs.push(format!(
                "vector metric of {name} is {}, not COSINE",
                get("distance_metric")
            ));
        }
        if !get("data_type").eq_ignore_ascii_case(vector_type) {
            diffs.push(format!(
                "vector type of {name} is {}, not {vector_type}",
                get("data_type")
            ));
        }
    };
    match find("embedding") {
        None => diffs.push("field embedding is missing".into()),
        Some(a) => vector("embedding", a, &mut diffs),
    }
    let windows = find("windows");
    if let Some(a) = windows {
        vector("windows", a, &mut diffs);
        let path = field(a, "identifier").and_then(text).unwrap_or_default();
        let want = if compact { "windows" } else { WINDOWS_PATH };
        if path != want {
            diffs.push(format!("field windows indexes {path}, not {want}"));
        }
    }
    if diffs.is_empty() {
        Ok(Found {
            layout,
            windows: windows.is_some(),
        })
    } else {
        Err(format!(
            "index {index} does not match: {}",
            diffs.join("; ")
        ))
    }
}

/// The layout an index's key type says (JSON: the guide's, HASH: compact), if either.
pub fn layout_of(info: &Value) -> Option<Storage> {
    let def = field(array(info), "index_definition")
        .map(array)
        .unwrap_or_default();
    match field(def, "key_type").and_then(text).as_deref() {
        Some("JSON") => Some(Storage::Guide),
        Some("HASH") => Some(Storage::Compact),
        _ => None,
    }
}

/// One attribute of FT.INFO as (key, value) pairs and flags, read token by token (flags such as
/// `SORTABLE` or `CASESENSITIVE` stand alone, so the list is not a plain key-value list).
fn attribute(a: &[Value]) -> (Vec<(String, String)>, Vec<String>) {
    const VALUED: [&str; 14] = [
        "identifier",
        "attribute",
        "type",
        "weight",
        "separator",
        "algorithm",
        "data_type",
        "dim",
        "distance_metric",
        "m",
        "ef_construction",
        "ef_runtime",
        "epsilon",
        "phonetic",
    ];
    let (mut pairs, mut flags) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < a.len() {
        let k = text(&a[i]).unwrap_or_default();
        if VALUED.contains(&k.to_ascii_lowercase().as_str()) {
            pairs.push((
                k.to_ascii_lowercase(),
                a.get(i + 1).and_then(text).unwrap_or_default(),
            ));
            i += 2;
        } else {
            flags.push(k.to_ascii_uppercase());
            i += 1;
        }
    }
    (pairs, flags)
}

/// An index attribute as FT.INFO lists it: its (name, value) pairs and its flags.
type Attribute = (Vec<(String, String)>, Vec<String>);

fn attributes(info: &Value) -> Vec<Attribute> {
    field(array(info), "attributes")
        .map(array)
        .unwrap_or_default()
        .iter()
        .map(|a| attribute(array(a)))
        .collect()
}

/// The dimension of the index's vector field, if it has one.
pub fn vector_dim(info: &Value) -> Option<usize> {
    attributes(info).iter().find_map(|(p, _)| {
        let get = |k: &str| p.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
        (get("type") == Some("VECTOR"))
            .then(|| get("dim").and_then(|d| d.parse().ok()))
            .flatten()
    })
}

/// FT.CREATE arguments (after the command name) that make again the index FT.INFO describes, for
/// the field types the guide's and memproxy's schemas use (TEXT, TAG, NUMERIC, VECTOR); the
/// rollback of a migration recreates the original index with them.
pub fn create_args_from_info(info: &Value, index: &str) -> Result<Vec<String>, String> {
    let def = field(array(info), "index_definition")
        .map(array)
        .unwrap_or_default();
    let key_type = field(def, "key_type").and_then(text).unwrap_or_default();
    let prefixes: Vec<String> = field(def, "prefixes")
        .map(array)
        .unwrap_or_default()
        .iter()
        .filter_map(text)
        .collect();
    let mut a: Vec<String> = vec![index.into(), "ON".into(), key_type, "PREFIX".into()];
    a.push(prefixes.len().to_string());
    a.extend(prefixes);
    // Index-wide options (the compact layout's NOOFFSETS NOHL).
    for o in field(array(info), "index_options")
        .map(array)
        .unwrap_or_default()
        .iter()
        .filter_map(text)
    {
        let o = o.to_ascii_uppercase();
        if ["NOOFFSETS", "NOHL", "NOFREQS", "NOFIELDS"].contains(&o.as_str()) {
            a.push(o);
        }
    }
    a.push("SCHEMA".into());
    for (pairs, flags) in attributes(info) {
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(x, _)| x == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let ty = get("type");
        a.extend([get("identifier"), "AS".into(), get("attribute"), ty.clone()]);
        match ty.as_str() {
            "TEXT" => {
                let w = get("weight");
                if !w.is_empty() && w != "1" {
                    a.extend(["WEIGHT".into(), w]);
                }
            }
            "TAG" => {
                let sep = get("separator");
                if !sep.is_empty() {
                    a.extend(["SEPARATOR".into(), sep]);
                }
            }
            "NUMERIC" => {}
            "VECTOR" => {
                let mut params = vec![
                    "TYPE".to_string(),
                    get("data_type"),
                    "DIM".into(),
                    get("dim"),
                    "DISTANCE_METRIC".into(),
                    get("distance_metric"),
                ];
                for (k, name) in [("m", "M"), ("ef_construction", "EF_CONSTRUCTION")] {
                    let v = get(k);
                    if !v.is_empty() && get("algorithm") == "HNSW" {
                        params.extend([name.to_string(), v]);
                    }
                }
                a.push(get("algorithm"));
                a.push(params.len().to_string());
                a.extend(params);
                continue;
            }
            other => {
                return Err(format!(
                    "field {} has type {other}, which migrate cannot recreate",
                    get("attribute")
                ))
            }
        }
        for f in flags {
            if ["SORTABLE", "CASESENSITIVE", "NOSTEM", "NOINDEX"].contains(&f.as_str()) {
                a.push(f);
            }
        }
    }
    Ok(a)
}

/// Whether the scope tags (user, namespace, source_thread) match case-sensitively, as in the
/// indexes memproxy creates (the guide's do not; memproxy then checks scopes exactly itself).
pub fn scope_tags_case_sensitive(info: &Value) -> bool {
    let attrs = attributes(info);
    ["user", "namespace", "source_thread"].iter().all(|name| {
        attrs.iter().any(|(pairs, flags)| {
            pairs.iter().any(|(k, v)| k == "attribute" && v == name)
                && flags.iter().any(|f| f == "CASESENSITIVE")
        })
    })
}
