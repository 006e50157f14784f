//! When a recall question points in time: fixed rules read phrases such as "yesterday", "two
//! weeks ago", "last weekend", "on Monday", "in March" or "in 2023" into a [`Window`] of creation
//! times, so the ranking can favour memories written then. Days are UTC days of 86,400 s counted
//! back from the question's own time, and the first phrase in the question wins.
//! Left out (no window): future phrases ("next Monday", "in two days") and times relative to an
//! event ("before the trip", "since we met").

/// Seconds in a day.
const DAY: f64 = 86_400.0;
/// Only this many chars of a question are read.
const MAX_CHARS: usize = 2_000;
/// The latest question time accepted: 9999-12-31T23:59:59Z.
const MAX_AT: f64 = 253_402_300_799.0;
/// No phrase reaches further back than this.
const MAX_BACK: f64 = 200.0 * 365.0 * DAY;

/// A span of creation times a question points at, in unix seconds: memories created within
/// [start, end] match fully; the ranking fades the match out over `tolerance` seconds beyond
/// either end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub start: f64,
    pub end: f64,
    pub tolerance: f64,
}

impl Window {
    /// 1.0 inside [start, end], falling linearly to 0.0 at `tolerance` beyond either end, 0.0
    /// further.
    pub fn weight(&self, ts: f64) -> f64 {
        if !ts.is_finite() {
            return 0.0;
        }
        if ts >= self.start && ts <= self.end {
            return 1.0;
        }
        let distance = if ts < self.start {
            self.start - ts
        } else {
            ts - self.end
        };
        if self.tolerance > 0.0 && distance < self.tolerance {
            (1.0 - distance / self.tolerance).clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    fn new(start: f64, end: f64, tolerance: f64) -> Self {
        Window {
            start,
            end,
            tolerance,
        }
    }

    /// `centre` ± `half`, fading over `tolerance`.
    fn around(centre: f64, half: f64, tolerance: f64) -> Self {
        Window::new(centre - half, centre + half, tolerance)
    }

    /// Whole UTC days: `count` days from unix day `first`, fading over a day.
    fn days(first: i64, count: i64) -> Self {
        Window::new(first as f64 * DAY, (first + count) as f64 * DAY, DAY)
    }

    /// Finite, ordered, and not before 1970.
    fn is_sound(&self) -> bool {
        self.start.is_finite()
            && self.end.is_finite()
            && self.tolerance.is_finite()
            && self.start >= 0.0
            && self.start <= self.end
            && self.tolerance >= 0.0
    }
}

/// The time window `question` refers to, relative to `at` (unix seconds: the question's own
/// time), or None when it names none. Never panics, bounded work for any input (it only looks at
/// the first 2,000 chars of the question).
pub fn window(question: &str, at: f64) -> Option<Window> {
    if !(0.0..=MAX_AT).contains(&at) {
        return None;
    }
    let words = words(question);
    let now = Now::new(at);
    (0..words.len()).find_map(|i| phrase(&words, i, &now).filter(Window::is_sound))
}

/// The question's words: runs of alphanumeric chars (any script), ASCII-lowercased, from its
/// first [`MAX_CHARS`] chars. A word with a non-ASCII char never equals a rule's word.
fn words(question: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    for c in question.chars().take(MAX_CHARS) {
        if c.is_alphanumeric() {
            word.push(c.to_ascii_lowercase());
        } else if !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The question's time, as the rules need it.
struct Now {
    at: f64,
    /// Unix day number of `at` (UTC).
    day: i64,
    year: i64,
    month: u32,
}

/// How a month or year is named: "in March", "last March", "since March".
#[derive(Clone, Copy, PartialEq)]
enum How {
    In,
    Last,
    Since,
}

impl Now {
    fn new(at: f64) -> Self {
        let day = (at / DAY).floor() as i64;
        let (year, month) = civil_from_days(day);
        Now {
            at,
            day,
            year,
            month,
        }
    }

    /// The whole UTC day `n` days before the day of `at`.
    fn days_back(&self, n: i64) -> Window {
        Window::days(self.day - n, 1)
    }

    /// The last `span` seconds up to `at`.
    fn back(&self, span: f64, tolerance: f64) -> Window {
        Window::new(self.at - span, self.at, tolerance)
    }

    /// "recently", "lately", …: the last two weeks.
    fn recent(&self) -> Window {
        self.back(14.0 * DAY, 14.0 * DAY)
    }

    /// Unix day number of the most recent `weekday` (0 = Monday) strictly before the day of `at`.
    fn last_weekday(&self, weekday: i64) -> i64 {
        // 1970-01-01 (day 0) was a Thursday.
        let today = (self.day + 3).rem_euclid(7);
        match (today - weekday).rem_euclid(7) {
            0 => self.day - 7,
            k => self.day - k,
        }
    }

    /// A calendar month: the most recent `month` that started before `at` ("in", "since"), or
    /// the most recent one before the current month ("last"), or that of `year` when given.
    fn month(&self, month: u32, how: How, year: Option<i64>) -> Option<Window> {
        let year = match (year, how) {
            (Some(year), _) => year,
            (None, How::Last) if month < self.month => self.year,
            (None, How::Last) => self.year - 1,
            (None, _) if month <= self.month => self.year,
            (None, _) => self.year - 1,
        };
        let start = days_from_civil(year, month, 1) as f64 * DAY;
        let next = if month == 12 {
            days_from_civil(year + 1, 1, 1)
        } else {
            days_from_civil(year, month + 1, 1)
        } as f64
            * DAY;
        if start > self.at {
            return None;
        }
        let end = match how {
            How::Since => self.at,
            _ => next.min(self.at),
        };
        Some(Window::new(start, end, 7.0 * DAY))
    }

    /// A calendar year not after the year of `at`; "since" runs on to `at`.
    fn calendar_year(&self, year: i64, how: How) -> Option<Window> {
        if year > self.year {
            return None;
        }
        let start = days_from_civil(year, 1, 1) as f64 * DAY;
        let end = match how {
            How::Since => self.at,
            _ => (days_from_civil(year + 1, 1, 1) as f64 * DAY).min(self.at),
        };
        Some(Window::new(start, end, 30.0 * DAY))
    }
}

/// The unit of "N `<unit>`s ago" and "the last N `<unit>`s".
#[derive(Clone, Copy)]
enum Unit {
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    fn parse(word: &str) -> Option<Unit> {
        match word {
            "day" | "days" => Some(Unit::Day),
            "week" | "weeks" => Some(Unit::Week),
            "month" | "months" => Some(Unit::Month),
            "year" | "years" => Some(Unit::Year),
            _ => None,
        }
    }

    /// Length, half-width of an "ago" window, tolerance: all in days.
    fn shape(self) -> (f64, f64, f64) {
        match self {
            Unit::Day => (1.0, 0.0, 2.0),
            Unit::Week => (7.0, 3.0, 7.0),
            Unit::Month => (30.0, 10.0, 20.0),
            Unit::Year => (365.0, 30.0, 90.0),
        }
    }
}

/// The window of the phrase starting at word `i`, if one does.
fn phrase(words: &[String], i: usize, now: &Now) -> Option<Window> {
    let word = |k: usize| words.get(i + k).map_or("", String::as_str);
    let prev = if i == 0 { "" } else { words[i - 1].as_str() };
    match word(0) {
        "today" | "tonight" => Some(now.days_back(0)),
        "yesterday" => Some(now.days_back(1)),
        "day" if word(1) == "before" && word(2) == "yesterday" => Some(now.days_back(2)),
        "recently" | "lately" | "latest" => Some(now.recent()),
        "just" if word(1) == "now" => Some(now.recent()),
        "most" if word(1) == "recent" => Some(now.recent()),
        "other" if prev == "the" && word(1) == "day" => Some(now.recent()),
        "weekend" if matches!(prev, "last" | "this" | "past" | "the") => {
            Some(Window::days(now.last_weekday(5), 2))
        }
        "this" => match word(1) {
            "morning" | "afternoon" | "evening" => Some(now.days_back(0)),
            "week" => Some(now.back(7.0 * DAY, 3.0 * DAY)),
            "month" => Some(now.back(31.0 * DAY, 7.0 * DAY)),
            "year" => Some(now.back(365.0 * DAY, 30.0 * DAY)),
            _ => None,
        },
        "last" | "past" => last(words, i, now),
        "in" | "since" | "during" | "on" => calendar(words, i, now),
        other => match weekday(other) {
            Some(_) if prev == "next" => None,
            Some(weekday) => Some(Window::days(now.last_weekday(weekday), 1)),
            None => ago(words, i, now),
        },
    }
}

/// "last week", "past month", "last year", "last night", "last March", "the last 3 days".
fn last(words: &[String], i: usize, now: &Now) -> Option<Window> {
    let word = |k: usize| words.get(i + k).map_or("", String::as_str);
    let at = now.at;
    match word(1) {
        "week" => Some(Window::around(at - 7.0 * DAY, 4.0 * DAY, 7.0 * DAY)),
        "month" => Some(Window::around(at - 30.0 * DAY, 15.0 * DAY, 20.0 * DAY)),
        "year" => Some(Window::around(at - 365.0 * DAY, 60.0 * DAY, 120.0 * DAY)),
        "night" if word(0) == "last" => Some(now.days_back(1)),
        next => match month_name(next) {
            Some(month) if word(0) == "last" => now.month(month, How::Last, None),
            Some(_) => None,
            None => {
                let (n, used) = quantity(words, i + 1)?;
                let unit = Unit::parse(word(1 + used))?;
                let (length, _, tolerance) = unit.shape();
                let span = n as f64 * length * DAY;
                (span <= MAX_BACK).then(|| now.back(span, tolerance * DAY))
            }
        },
    }
}

/// "in March", "since Jan", "on May", "in March 2023", "in 2023", "in the year 2023",
/// "since 2021" ("back in …" is "in …").
fn calendar(words: &[String], i: usize, now: &Now) -> Option<Window> {
    let word = |k: usize| words.get(i + k).map_or("", String::as_str);
    let how = if word(0) == "since" {
        How::Since
    } else {
        How::In
    };
    if let Some(month) = month_name(word(1)) {
        // "in March 2023"; a year out of range ("in March 1492") names no window.
        let year = year_number(word(2));
        if year.is_none() && word(2).len() == 4 && word(2).bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        return now.month(month, how, year);
    }
    if word(0) == "on" {
        return None;
    }
    let year = if word(1) == "the" && word(2) == "year" {
        word(3)
    } else {
        word(1)
    };
    now.calendar_year(year_number(year)?, how)
}

/// "3 days ago", "a couple of weeks back", "several months ago": centred N units back.
fn ago(words: &[String], i: usize, now: &Now) -> Option<Window> {
    let word = |k: usize| words.get(i + k).map_or("", String::as_str);
    let (n, used) = quantity(words, i)?;
    let unit = Unit::parse(word(used))?;
    if !matches!(word(used + 1), "ago" | "back") {
        return None;
    }
    let (length, half, tolerance) = unit.shape();
    let back = n as f64 * length * DAY;
    if back > MAX_BACK {
        return None;
    }
    Some(Window::around(now.at - back, half * DAY, tolerance * DAY))
}

/// A count starting at word `i`, and how many words it takes: digits, "one" … "twelve", "a",
/// "an", "a couple (of)", "a few", "several".
fn quantity(words: &[String], i: usize) -> Option<(u64, usize)> {
    let word = |k: usize| words.get(i + k).map_or("", String::as_str);
    let of = |k: usize| usize::from(word(k) == "of");
    Some(match word(0) {
        "a" | "an" => match word(1) {
            "couple" => (2, 2 + of(2)),
            "few" => (3, 2),
            _ => (1, 1),
        },
        "couple" => (2, 1 + of(1)),
        "few" => (3, 1),
        "several" => (4, 1),
        other => (number(other)?, 1),
    })
}

/// A number written in digits (at most 9) or as a word up to twelve.
fn number(word: &str) -> Option<u64> {
    const WORDS: [&str; 12] = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve",
    ];
    if let Some(k) = WORDS.iter().position(|w| *w == word) {
        return Some(k as u64 + 1);
    }
    if word.is_empty() || word.len() > 9 || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse().ok()
}

/// A year written as four digits, 1970..=9999.
fn year_number(word: &str) -> Option<i64> {
    if word.len() != 4 || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse()
        .ok()
        .filter(|year| (1970..=9999).contains(year))
}

/// 0 = Monday … 6 = Sunday, for a full weekday name.
fn weekday(word: &str) -> Option<i64> {
    const DAYS: [&str; 7] = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    DAYS.iter().position(|d| *d == word).map(|k| k as i64)
}

/// 1 … 12 for a month name or its three-letter abbreviation ("sept" too). Callers only ask after
/// "in", "last", "since", "during" or "on", which is what keeps the verb "may" out.
fn month_name(word: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let k = MONTHS.iter().position(|m| {
        *m == word
            || (word.len() == 3 && m.starts_with(word))
            || (word == "sept" && *m == "september")
    })?;
    Some(k as u32 + 1)
}

/// Unix day number of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (month, day) = (i64::from(month), i64::from(day));
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Year and month of a unix day number (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// 2024-03-15T12:00:00Z, a Friday.
    const AT: f64 = 1_710_504_000.0;
    /// 2024-03-15T00:00:00Z.
    const TODAY: f64 = 1_710_460_800.0;

    fn w(question: &str) -> Option<Window> {
        window(question, AT)
    }

    fn check(question: &str, start: f64, end: f64, tolerance: f64) {
        assert_eq!(
            w(question),
            Some(Window::new(start, end, tolerance)),
            "{question:?}"
        );
    }

    fn days(n: f64) -> f64 {
        n * DAY
    }

    #[test]
    fn today_and_its_synonyms() {
        for q in [
            "what did I do today?",
            "this morning",
            "plans for tonight",
            "what did we say earlier today",
            "TODAY's notes",
        ] {
            check(q, TODAY, TODAY + DAY, DAY);
        }
    }

    #[test]
    fn yesterday_and_the_day_before() {
        check("what did I eat yesterday", TODAY - DAY, TODAY, DAY);
        check("last night", TODAY - DAY, TODAY, DAY);
        check(
            "what about the day before yesterday?",
            TODAY - days(2.0),
            TODAY - DAY,
            DAY,
        );
    }

    #[test]
    fn n_units_ago() {
        check("3 days ago", AT - days(3.0), AT - days(3.0), days(2.0));
        check(
            "several days ago",
            AT - days(4.0),
            AT - days(4.0),
            days(2.0),
        );
        check(
            "twelve days back",
            AT - days(12.0),
            AT - days(12.0),
            days(2.0),
        );
        check("a day ago", AT - DAY, AT - DAY, days(2.0));
        check("two weeks ago", AT - days(17.0), AT - days(11.0), days(7.0));
        check("a week ago", AT - days(10.0), AT - days(4.0), days(7.0));
        check(
            "a couple of months ago",
            AT - days(70.0),
            AT - days(50.0),
            days(20.0),
        );
        check(
            "a couple months ago",
            AT - days(70.0),
            AT - days(50.0),
            days(20.0),
        );
        check(
            "an year ago",
            AT - days(395.0),
            AT - days(335.0),
            days(90.0),
        );
        check(
            "a few years ago",
            AT - days(1125.0),
            AT - days(1065.0),
            days(90.0),
        );
        check(
            "54 years ago",
            AT - days(19740.0),
            AT - days(19680.0),
            days(90.0),
        );
        assert_eq!(w("55 years ago"), None, "before 1970");
        assert_eq!(w("3000 years ago"), None);
        assert_eq!(w("99999999999999 days ago"), None);
        assert_eq!(w("3 days"), None, "no ago");
        assert_eq!(w("in a few days"), None);
    }

    #[test]
    fn last_and_this_week_month_year() {
        check("last week", AT - days(11.0), AT - days(3.0), days(7.0));
        check(
            "over the past week",
            AT - days(11.0),
            AT - days(3.0),
            days(7.0),
        );
        check("this week", AT - days(7.0), AT, days(3.0));
        check("last month", AT - days(45.0), AT - days(15.0), days(20.0));
        check("past month", AT - days(45.0), AT - days(15.0), days(20.0));
        check("this month", AT - days(31.0), AT, days(7.0));
        check("last year", AT - days(425.0), AT - days(305.0), days(120.0));
        check("this year", AT - days(365.0), AT, days(30.0));
        check("the last 3 days", AT - days(3.0), AT, days(2.0));
        check("the past couple of weeks", AT - days(14.0), AT, days(7.0));
    }

    #[test]
    fn weekends() {
        // Saturday 2024-03-09 to Sunday 24:00.
        let sat = 1_709_942_400.0;
        for q in ["last weekend", "this weekend", "over the weekend"] {
            check(q, sat, sat + days(2.0), DAY);
        }
        // On a Saturday, the one a week before; on a Sunday, the one in progress.
        let on_sat = window("over the weekend", 1_710_590_400.0);
        assert_eq!(on_sat, Some(Window::new(sat, sat + days(2.0), DAY)));
        let on_sun = window("over the weekend", 1_710_676_800.0);
        let sat16 = sat + days(7.0);
        assert_eq!(on_sun, Some(Window::new(sat16, sat16 + days(2.0), DAY)));
        assert_eq!(w("next weekend"), None);
        assert_eq!(w("my weekend plans"), None);
    }

    #[test]
    fn recent() {
        for q in [
            "what did I do recently",
            "lately",
            "the other day",
            "my most recent note",
            "the latest plan",
            "what did I just now say",
        ] {
            check(q, AT - days(14.0), AT, days(14.0));
        }
        assert_eq!(w("every other day"), None);
    }

    #[test]
    fn weekdays() {
        let monday = 1_710_115_200.0;
        check("on Monday", monday, monday + DAY, DAY);
        check("Monday", monday, monday + DAY, DAY);
        let friday = 1_709_856_000.0;
        check("last Friday", friday, friday + DAY, DAY);
        check("what about thursday", TODAY - DAY, TODAY, DAY);
        assert_eq!(w("next Monday"), None);
        assert_eq!(w("mondays"), None);
    }

    #[test]
    fn months() {
        let mar24 = 1_709_251_200.0;
        check("in March", mar24, AT, days(7.0));
        check("back in mar", mar24, AT, days(7.0));
        check("last March", 1_677_628_800.0, 1_680_307_200.0, days(7.0));
        check("back in June", 1_685_577_600.0, 1_688_169_600.0, days(7.0));
        check("in May", 1_682_899_200.0, 1_685_577_600.0, days(7.0));
        check("in Feb", 1_706_745_600.0, mar24, days(7.0));
        check("last February", 1_706_745_600.0, mar24, days(7.0));
        check("since December", 1_701_388_800.0, AT, days(7.0));
        check("in March 2021", 1_614_556_800.0, 1_617_235_200.0, days(7.0));
        assert_eq!(w("in March 2025"), None);
        assert_eq!(w("in April 2024"), None);
        assert_eq!(w("may I ask what I said"), None);
        assert_eq!(w("it may rain"), None);
        assert_eq!(w("we will march on"), None);
        assert_eq!(w("lunch in marché"), None);
    }

    #[test]
    fn years() {
        check("in 2023", 1_672_531_200.0, 1_704_067_200.0, days(30.0));
        check(
            "back in the year 2023",
            1_672_531_200.0,
            1_704_067_200.0,
            days(30.0),
        );
        check("in 2024", 1_704_067_200.0, AT, days(30.0));
        check("since 2023", 1_672_531_200.0, AT, days(30.0));
        assert_eq!(w("in 2025"), None);
        assert_eq!(w("in the year 3000"), None);
        assert_eq!(w("in 1969"), None);
        assert_eq!(w("in 20234"), None);
        assert_eq!(w("on 2023"), None);
    }

    #[test]
    fn first_phrase_wins() {
        check("yesterday or last week?", TODAY - DAY, TODAY, DAY);
        check(
            "last week or yesterday?",
            AT - days(11.0),
            AT - days(3.0),
            days(7.0),
        );
        check("last Smarch, then yesterday", TODAY - DAY, TODAY, DAY);
    }

    #[test]
    fn bad_question_times() {
        for at in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 1e300] {
            assert_eq!(window("yesterday", at), None, "{at}");
        }
        assert_eq!(window("yesterday", 1000.0), None, "before 1970");
        assert_eq!(window("today", 1000.0), Some(Window::new(0.0, DAY, DAY)));
    }

    #[test]
    fn weight_shape() {
        let win = Window::new(100.0, 200.0, 50.0);
        assert_eq!(win.weight(100.0), 1.0);
        assert_eq!(win.weight(150.0), 1.0);
        assert_eq!(win.weight(200.0), 1.0);
        assert_eq!(win.weight(75.0), 0.5);
        assert_eq!(win.weight(225.0), 0.5);
        assert_eq!(win.weight(50.0), 0.0);
        assert_eq!(win.weight(250.0), 0.0);
        assert_eq!(win.weight(1e12), 0.0);
        assert_eq!(win.weight(f64::NAN), 0.0);
        assert_eq!(win.weight(f64::INFINITY), 0.0);
        let sharp = Window::new(100.0, 200.0, 0.0);
        assert_eq!(sharp.weight(99.0), 0.0);
        assert_eq!(sharp.weight(100.0), 1.0);
    }

    #[test]
    fn adversarial_inputs() {
        let started = Instant::now();
        let ago = "ago ".repeat(2_500);
        let last = "last ".repeat(5_000);
        let late = format!("{} yesterday", "x ".repeat(1_500));
        let emoji = "🕰️⏳ yesterday? 🤔".repeat(300);
        for q in [
            "3000 years ago",
            "last Smarch",
            "may I ask",
            "",
            "!!!",
            "the of and",
            "before the trip",
            "in the year 3000",
            "先週 何をした",
            "il y a trois jours",
            "Вчера",
            ago.as_str(),
            last.as_str(),
            late.as_str(),
        ] {
            assert_eq!(w(q), None, "{q:?}");
        }
        assert!(w(&emoji).is_some());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn calendar_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2024, 3, 15), 19_797);
        for day in (-800_000..3_000_000).step_by(997) {
            let (year, month) = civil_from_days(day);
            let first = days_from_civil(year, month, 1);
            assert!(first <= day && day - first < 31, "{day}");
        }
    }

    #[test]
    fn random_questions_give_sound_windows() {
        let vocab: Vec<&str> =
            "last this past next in on since back the a an few couple of several \
            ago day days week weeks month months year years today yesterday before weekend night \
            recently other just now march may dec monday sunday 2023 1969 3000 0 7 twelve \
            999999999 ? 先週 🙂"
                .split_whitespace()
                .collect();
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut found = 0;
        for _ in 0..2_000 {
            let len = next() % 8;
            let question = (0..len)
                .map(|_| vocab[(next() % vocab.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ");
            let at = match next() % 4 {
                0 => AT,
                1 => (next() % 4_000_000_000) as f64,
                2 => (next() % 200_000) as f64,
                _ => MAX_AT - (next() % 1_000_000) as f64,
            };
            if let Some(win) = window(&question, at) {
                found += 1;
                assert!(
                    win.start.is_finite() && win.end.is_finite(),
                    "{question:?} {at}"
                );
                assert!(win.tolerance.is_finite() && win.tolerance >= 0.0);
                assert!(win.start <= win.end, "{question:?} {at} {win:?}");
                assert!(win.start >= 0.0);
                let weight = win.weight(at);
                assert!((0.0..=1.0).contains(&weight));
            }
        }
        assert!(found > 100, "only {found} windows");
    }
}
