//! The index remembers which model wrote its vectors (issue 17, point 3): a memproxy with
//! another model refuses MEM.* with the command to run, `memproxy reembed` re-embeds every
//! memory (resumably) and stamps the index, and then the other model is the one refused.

mod common;

use std::process::Command;

use common::*;

fn embedding(d: &mut redis::Connection, id: &str) -> String {
    redis::cmd("JSON.GET")
        .arg(format!("agent:mem:{id}"))
        .arg("$.embedding")
        .query(d)
        .unwrap()
}

fn reembed(url: &str, model: &std::path::Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_memproxy"))
        .args(["reembed", "--upstream", url, "--model"])
        .arg(model)
        .env("MEMPROXY_DEPS", deps())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn another_model_is_refused_until_reembed() {
    let redis = Redis::start(&[]);
    let mut d = direct(&redis);
    let fp32 = Proxy::start(&redis.url(), |_| {});
    let mut a = fp32.client();
    let mut ids = Vec::new();
    for t in [
        "The user is allergic to peanuts.",
        "The user prefers tea.",
        "The user lives in Lisbon.",
    ] {
        ids.push(as_str(get(&q(&mut a, &["MEM.REMEMBER", t]), "id")));
    }
    let before = embedding(&mut d, &ids[0]);
    let stamp: String = redis::cmd("HGET")
        .arg("agentmem:idx:model")
        .arg("name")
        .query(&mut d)
        .unwrap();
    assert_eq!(stamp, "all-MiniLM-L6-v2");

    let int8_dir = deps().join("model/all-MiniLM-L6-v2-int8");
    let dir = int8_dir.display().to_string();
    let int8 = Proxy::start(&redis.url(), |c| c.model = Some(dir));
    let mut b = int8.client();
    let e = err(&mut b, &["MEM.RECALL", "Any food allergies?"]);
    assert!(
        e.contains("memproxy reembed") && e.contains("all-MiniLM-L6-v2-int8"),
        "{e}"
    );
    let e = err(&mut b, &["MEM.REMEMBER", "The user swims."]);
    assert!(e.contains("memproxy reembed"), "{e}");
    // Ordinary commands are untouched.
    q(&mut b, &["SET", "plain", "1"]);
    assert_eq!(as_str(&q(&mut b, &["GET", "plain"])), "1");

    let (ok, log) = reembed(&redis.url(), &int8_dir);
    assert!(ok, "{log}");
    assert!(log.contains("3 memories examined, 3 re-embedded"), "{log}");
    assert_ne!(
        embedding(&mut d, &ids[0]),
        before,
        "the vector was rewritten"
    );
    reembedded(&mut b, &mut a, "the int8 proxy", "the fp32 proxy", &ids[0]);
    // Run again (as after an interruption): nothing left to re-embed.
    let (ok, log) = reembed(&redis.url(), &int8_dir);
    assert!(ok, "{log}");
    assert!(log.contains("3 memories examined, 0 re-embedded"), "{log}");
}

/// 10,000 memories written by some other model (random vectors): all re-embedded in one run.
#[test]
fn ten_thousand_memories_reembedded() {
    let redis = Redis::start(&[]);
    let mut d = direct(&redis);
    let proxy = Proxy::start(&redis.url(), |_| {});
    q(&mut proxy.client(), &["MEM.INFO"]); // the index exists
    for chunk in (0..10_000u64).collect::<Vec<_>>().chunks(500) {
        let mut p = redis::pipe();
        for &i in chunk {
            p.add_command(plant_cmd(
                &format!("r{i}"),
                "ann",
                "default",
                "semantic",
                &random_unit(i),
                i as f64,
                0,
            ));
        }
        let _: () = p.query(&mut d).unwrap();
    }
    wait_indexed(&mut d);
    let started = std::time::Instant::now();
    let (ok, log) = reembed(&redis.url(), &deps().join("model/all-MiniLM-L6-v2"));
    eprintln!("reembed of 10,000 memories: {:?}", started.elapsed());
    assert!(ok, "{log}");
    assert!(
        log.contains("10000 memories examined, 10000 re-embedded"),
        "{log}"
    );
    // The stored vector is now the model's embedding of the memory's text.
    let stored: String = redis::cmd("JSON.GET")
        .arg("agent:mem:r4242")
        .arg("$.embedding")
        .query(&mut d)
        .unwrap();
    let stored: Vec<Vec<f64>> = serde_json::from_str(&stored).unwrap();
    let model: Vec<f64> = items(&q(
        &mut proxy.client(),
        &["MEM.EMBED", "planted memory r4242"],
    ))
    .iter()
    .map(as_f64)
    .collect();
    let dot: f64 = stored[0].iter().zip(&model).map(|(a, b)| a * b).sum();
    assert!(dot > 0.99999, "cosine {dot}");
}
