//! A long text's windows: the model reads a text's first `max_seq_length` tokens (256 for
//! all-MiniLM-L6-v2; `layout`) and pools them into one vector, so a fact inside a long text is
//! lost twice: past the window, and diluted within it (100 characters of
//! unrelated text before a one-sentence fact move it from 0.43 to 0.82 cosine distance from a
//! question about it). A text longer than `LONG_CHARS` is therefore also embedded in windows of a
//! few sentences each (`WINDOW_CHARS` at most, cut at sentence ends, else at blanks), and `MODE
//! auto` searches them (the multi-value vector field `$.windows`) beside `embedding`.
//!
//! Windows cover the whole text. A text with more than `MAX_WINDOWS` sentence windows (past
//! ~25 KB of prose) gets runs of consecutive ones joined, so the windows stay `MAX_WINDOWS`: up to
//! ~100 KB of prose a joined window stays within the model's 256 tokens and every word is read;
//! past that each window is read to its 256th token only (the keyword side still sees every
//! word). That bounds the model time one write may take (~128 runs of ≤ 256 tokens; windows wait
//! behind callers' texts, see `worker`) and the vectors one memory stores.

/// A text longer than this (characters) gets windows.
pub const LONG_CHARS: usize = 600;
/// Characters in a window at most (a sentence longer than this is cut at blanks).
pub const WINDOW_CHARS: usize = 240;
/// Windows embedded at most (more sentence windows are joined in runs).
pub const MAX_WINDOWS: usize = 512;

/// The windows of `text` (none for a text of at most `LONG_CHARS` characters).
pub fn split(text: &str) -> Vec<&str> {
    if text.chars().count() <= LONG_CHARS {
        return Vec::new();
    }
    // Sentences: byte ranges ending after `.`, `!`, `?` followed by a blank, or at a newline.
    let mut sentences: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_blank = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        if c == '\n' || (matches!(c, '.' | '!' | '?') && next_blank) {
            let end = i + c.len_utf8();
            sentences.push((start, end));
            start = end;
        }
    }
    if start < text.len() {
        sentences.push((start, text.len()));
    }
    let mut out: Vec<&str> = Vec::new();
    let mut cur: Option<(usize, usize)> = None;
    fn push<'t>(text: &'t str, out: &mut Vec<&'t str>, (s, e): (usize, usize)) {
        let w = text[s..e].trim();
        if w.chars().any(char::is_alphanumeric) {
            out.push(w);
        }
    }
    for (s, e) in sentences {
        // A long sentence on its own, in pieces cut at blanks.
        if text[s..e].chars().count() > WINDOW_CHARS {
            if let Some(c) = cur.take() {
                push(text, &mut out, c);
            }
            let mut from = s;
            while from < e {
                let to_end = text[from..e]
                    .char_indices()
                    .take(WINDOW_CHARS)
                    .last()
                    .map_or(from, |(j, ch)| from + j + ch.len_utf8());
                let mut to = to_end;
                if to < e {
                    if let Some(b) = text[from..to].rfind(char::is_whitespace) {
                        if b > 0 {
                            to = from + b;
                        }
                    }
                }
                push(text, &mut out, (from, to));
                from = to;
            }
            continue;
        }
        cur = match cur {
            // Join short sentences while the window stays within WINDOW_CHARS / 2.
            Some((cs, _)) if text[cs..e].chars().count() <= WINDOW_CHARS / 2 => Some((cs, e)),
            Some(c) => {
                push(text, &mut out, c);
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some(c) = cur {
        push(text, &mut out, c);
    }
    join_runs(text, out)
}

/// More than `MAX_WINDOWS` windows: join runs of `ceil(n / MAX_WINDOWS)` consecutive ones (each
/// the span of `text` from its first window's start to its last one's end).
fn join_runs<'t>(text: &'t str, windows: Vec<&'t str>) -> Vec<&'t str> {
    if windows.len() <= MAX_WINDOWS {
        return windows;
    }
    let per = windows.len().div_ceil(MAX_WINDOWS);
    let at = |w: &str| w.as_ptr() as usize - text.as_ptr() as usize;
    windows
        .chunks(per)
        .map(|run| {
            let (first, last) = (run[0], run[run.len() - 1]);
            &text[at(first)..at(last) + last.len()]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_have_none_long_ones_are_covered_to_the_end() {
        assert!(split("The user likes tea.").is_empty());
        assert!(split(&"a ".repeat(LONG_CHARS / 2)).is_empty());
        let text = format!("{} The answer is 42.", "filler word ".repeat(200));
        let w = split(&text);
        assert!(!w.is_empty());
        assert!(
            w.last().unwrap().ends_with("The answer is 42."),
            "{:?}",
            w.last()
        );
        assert!(w.iter().all(|x| x.chars().count() <= WINDOW_CHARS));
        // Sentences become windows of their own, joined while short.
        let prose = format!(
            "{} My sister Ines moved to Porto. Thanks!",
            "The sky was grey all day and it rained. ".repeat(20)
        );
        let w = split(&prose);
        assert!(
            w.iter()
                .any(|x| x.contains("My sister Ines moved to Porto.") && x.len() < 130),
            "{w:?}"
        );
        // Multi-byte text is cut on char boundaries; a huge text gets MAX_WINDOWS windows that
        // still cover it to the end.
        let big = format!("{} The last word is zebra.", "é ".repeat(200_000));
        let w = split(&big);
        assert!(w.len() <= MAX_WINDOWS, "{}", w.len());
        assert!(w.last().unwrap().ends_with("zebra."));
        // A 100 KB text of prose: every sentence in a window, none over ~1,000 characters.
        let prose = (0..1_000)
            .map(|i| format!("Sentence number {i} says something about the garden. "))
            .collect::<String>();
        assert!(prose.len() > 50_000);
        let w = split(&prose);
        assert!(w.len() <= MAX_WINDOWS);
        for i in (0..1_000).step_by(97) {
            let s = format!("Sentence number {i} says");
            assert!(w.iter().any(|x| x.contains(&s)), "{s} in no window");
        }
        assert!(
            w.iter().all(|x| x.chars().count() <= 4 * WINDOW_CHARS),
            "{:?}",
            w.iter().map(|x| x.len()).max()
        );
        let nospace = "x".repeat(5_000);
        assert!(split(&nospace).iter().all(|x| !x.is_empty()));
    }
}
