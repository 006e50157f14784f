//! The query side of `MODE auto`, the default recall: two things computed from the query's own
//! embedding and a few fixed prototype sentences, with no extra model run per query.
//!
//! - **The ranking vector** `norm(q − 0.8 · Q)`, where `Q` is the mean embedding of generic
//!   questions about a user. all-MiniLM-L6-v2 puts every question about "the user" close to
//!   every fact about "the user"; taking out the generic part leaves what the question is about.
//!   Memories are stored as they are (the guide's vectors); only the query moves, so this is a
//!   second KNN, not a re-embedding.
//! - **The personal lean** `q·P − max(q·G, q·T)`, where `P` is the mean of questions about a
//!   person, `G` of general-knowledge questions and `T` of small talk. "How many players are on a
//!   baseball team?" is near a football memory, but leans general; "thanks!" leans small talk;
//!   "is there anything they can't eat?" leans personal. The store's gate adds it (×2) to the best
//!   raw similarity.
//!
//! Measured on `bench/data/recall-eval.tsv` and the held-out questions of
//! `bench/data/recall-holdout.tsv` by `cargo bench --bench recall` (README, "Recall quality").

use tokio::sync::OnceCell;

use crate::embed::Embedder;
use crate::store::memory::Ranking;

/// How much of the generic-question direction the ranking vector drops.
pub const QUESTION_SHIFT: f32 = 0.8;

/// Generic questions about a user: the part of a question that says "about the user".
const GENERIC_QUESTIONS: [&str; 6] = [
    "What does the user do?",
    "Tell me about the user.",
    "Is the user ok?",
    "Does the user have something?",
    "Where is the user?",
    "What should I know about them?",
];

/// Questions about a person (the personal side of the lean). The last three are an agent's
/// "may I…?" questions, which name no fact ("Can I recommend a steakhouse?"): without them such
/// questions leaned general and the gate dropped them (tuning set recall@3 87.6% → 90.1%,
/// unrelated questions answered 1 → 0 of 31; held out unchanged).
const PERSONAL: [&str; 9] = [
    "What does the user like?",
    "Tell me about this person.",
    "What should I know about them?",
    "Does the user have any preferences?",
    "How should I help this person?",
    "What do I know about the user?",
    "Can I recommend something for them?",
    "Should I change how I answer this person?",
    "Would the user be fine with this?",
];

/// General-knowledge questions (the other side).
const GENERAL: [&str; 6] = [
    "What is the capital of a country?",
    "Explain how something works.",
    "Who invented it?",
    "How many are there?",
    "What is the definition of a word?",
    "Tell me a fact about science.",
];

/// Small talk (the other side too: "thanks!" is personal but asks for no memory).
const SMALL_TALK: [&str; 6] = [
    "Hello!",
    "Thanks a lot.",
    "Okay.",
    "Good night.",
    "How are you?",
    "Great, let's continue.",
];

/// The prototype means, embedded once by the engine's own model.
pub struct Prototypes {
    question: Vec<f32>,
    personal: Vec<f32>,
    general: Vec<f32>,
    small_talk: Vec<f32>,
}

/// Embedded when the engine starts (27 short sentences), so that no query pays for them.
#[derive(Default)]
pub struct Ranker {
    prototypes: OnceCell<Prototypes>,
}

async fn mean(embedder: &Embedder, texts: &[&str]) -> Result<Vec<f32>, crate::embed::EmbedError> {
    let mut sum: Vec<f32> = Vec::new();
    for t in texts {
        let v = embedder.embed(t).await?;
        if sum.is_empty() {
            sum = vec![0.0; v.len()];
        }
        for (s, x) in sum.iter_mut().zip(v.iter()) {
            *s += x;
        }
    }
    let n = texts.len() as f32;
    sum.iter_mut().for_each(|s| *s /= n);
    Ok(sum)
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64) * (*y as f64))
        .sum()
}

impl Ranker {
    /// Embed the prototypes now.
    pub async fn prepare(&self, embedder: &Embedder) -> Result<(), crate::embed::EmbedError> {
        self.prototypes(embedder).await.map(|_| ())
    }

    async fn prototypes(
        &self,
        embedder: &Embedder,
    ) -> Result<&Prototypes, crate::embed::EmbedError> {
        self.prototypes
            .get_or_try_init(|| async {
                Ok(Prototypes {
                    question: mean(embedder, &GENERIC_QUESTIONS).await?,
                    personal: mean(embedder, &PERSONAL).await?,
                    general: mean(embedder, &GENERAL).await?,
                    small_talk: mean(embedder, &SMALL_TALK).await?,
                })
            })
            .await
    }

    /// The ranking side of a query whose embedding is `q`.
    pub async fn ranking(
        &self,
        embedder: &Embedder,
        q: &[f32],
    ) -> Result<Ranking, crate::embed::EmbedError> {
        let p = self.prototypes(embedder).await?;
        let mut vector: Vec<f32> = q
            .iter()
            .zip(&p.question)
            .map(|(x, g)| x - QUESTION_SHIFT * g)
            .collect();
        crate::embed::normalize(&mut vector);
        Ok(Ranking {
            vector,
            lean: dot(q, &p.personal) - dot(q, &p.general).max(dot(q, &p.small_talk)),
        })
    }
}
