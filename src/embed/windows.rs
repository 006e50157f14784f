//! A long text's windows: the model reads a text's first 256 tokens and averages them, so a fact
//! inside a long text is lost twice: past the window, and diluted within it (100 characters of
//! unrelated text before a one-sentence fact move it from 0.43 to 0.82 cosine distance from a
//! question about it). A text longer than `LONG_CHARS` is therefore also embedded in windows of a
//! few sentences each (`WINDOW_CHARS` at most, cut at sentence ends, else at blanks), and `MODE
//! auto` searches them (the multi-value vector field `$.windows`) beside `embedding`.
//!
//! At most `MAX_WINDOWS`, from the start (about the first 10 KB of prose): beyond them only BM25
//! sees the text. That bounds the model time one write may take.

/// A text longer than this (characters) gets windows.
pub const LONG_CHARS: usize = 600;
/// Characters in a window at most (a sentence longer than this is cut at blanks).
pub const WINDOW_CHARS: usize = 240;
/// Windows embedded at most.
pub const MAX_WINDOWS: usize = 48;

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
                let mut to = from;
                let mut n = 0;
                for (j, ch) in text[from..e].char_indices() {
                    if n >= WINDOW_CHARS {
                        break;
                    }
                    n += 1;
                    to = from + j + ch.len_utf8();
                }
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
    out.truncate(MAX_WINDOWS);
    out
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
        // Multi-byte text is cut on char boundaries; a huge text is capped.
        let big = "é ".repeat(200_000);
        assert_eq!(split(&big).len(), MAX_WINDOWS);
        let nospace = "x".repeat(5_000);
        assert!(split(&nospace).iter().all(|x| !x.is_empty()));
    }
}
