//! Agent-memory sentences for benchmarks and tests: 8 subjects × 8 verbs × 8 objects, each
//! numbered (`(note i)`), so `sentence(i)` for i in 0..512 are all different. Shared by the
//! benches (through common.rs) and tests/memory.rs (busy scopes).

/// Agent-memory sentences (about 10–25 tokens), made distinct by `i` so no cache helps.
pub fn sentence(i: usize) -> String {
    const SUBJECTS: [&str; 8] = [
        "The user",
        "My manager",
        "The customer",
        "Our team",
        "The agent",
        "A colleague",
        "The client",
        "My sister",
    ];
    const VERBS: [&str; 8] = [
        "prefers",
        "asked about",
        "dislikes",
        "is planning",
        "mentioned",
        "forgot",
        "approved",
        "wants to revisit",
    ];
    const OBJECTS: [&str; 8] = [
        "concise answers without filler phrases",
        "the migration of the analytics warehouse to BigQuery",
        "a high-contrast light theme in editors and dashboards",
        "the postmortem for the order-routing outage",
        "restaurant suggestions that avoid peanuts",
        "the flaky test in the inventory service",
        "working in the Europe/Berlin time zone",
        "a weekly summary of open pull requests",
    ];
    format!(
        "{} {} {} (note {i}).",
        SUBJECTS[i % 8],
        VERBS[(i / 8) % 8],
        OBJECTS[(i / 64) % 8]
    )
}
