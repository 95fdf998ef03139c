//! Relative dates in a question ("last May", "two weeks ago", "yesterday", "in March 2025"),
//! read cheaply (a scan of the lower-cased words, no parser) into a time window relative to
//! the search's `now`. Search boosts memories whose time falls inside the window; nothing is
//! filtered out, so a misread date costs ranking, never a result.
//!
//! Only expressions anchored on `now` are read. Expressions anchored on an event ("two weeks
//! before my trip") are left to the text search: their anchor is itself a memory.

use crate::time::days_from_civil;

const DAY: i64 = 86_400_000;

/// A window `[start, end)` in Unix milliseconds and the words that gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub start: i64,
    pub end: i64,
    pub phrase: String,
}

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

fn month_of(w: &str) -> Option<u32> {
    let w = w.trim_end_matches(['.', ',', '?', '!', '\'', 's']);
    MONTHS
        .iter()
        .position(|m| {
            *m == w || (w.len() == 3 && m.starts_with(w) && w != "mar" && w != "may") || {
                // "sept"
                w == "sept" && *m == "september"
            }
        })
        .map(|i| i as u32 + 1)
}

fn number_of(w: &str) -> Option<i64> {
    const WORDS: [&str; 13] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    if let Ok(n) = w.parse::<i64>() {
        return (0..=400).contains(&n).then_some(n);
    }
    match w {
        "a" | "an" => Some(1),
        "couple" => Some(2),
        "few" | "several" => Some(3),
        _ => WORDS.iter().position(|x| *x == w).map(|i| i as i64),
    }
}

/// Civil (year, month) of a Unix-millisecond time.
fn year_month(ms: i64) -> (i64, u32) {
    let s = crate::time::rfc3339(ms);
    (
        s[0..4].parse().unwrap_or(1970),
        s[5..7].parse().unwrap_or(1),
    )
}

fn month_start(y: i64, m: u32) -> i64 {
    days_from_civil(y, m, 1) * DAY
}

fn month_window(y: i64, m: u32) -> (i64, i64) {
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (month_start(y, m), month_start(ny, nm))
}

fn unit_days(w: &str) -> Option<i64> {
    match w.trim_end_matches('s') {
        "day" => Some(1),
        "week" => Some(7),
        "month" => Some(30),
        "year" => Some(365),
        _ => None,
    }
}

/// The first relative date in `query`, as a window relative to `now` (Unix milliseconds).
pub fn window(query: &str, now: i64) -> Option<Window> {
    let lower = query.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_end_matches("'s").trim_matches('\''))
        .filter(|w| !w.is_empty())
        .collect();
    let today = now.div_euclid(DAY) * DAY;
    let (cy, cm) = year_month(now);
    let mk = |start: i64, end: i64, phrase: &[&str]| {
        Some(Window {
            start,
            end: end.max(start + DAY),
            phrase: phrase.join(" "),
        })
    };
    for i in 0..words.len() {
        let w = words[i];
        let next = words.get(i + 1).copied().unwrap_or("");
        let next2 = words.get(i + 2).copied().unwrap_or("");
        match w {
            "yesterday" => return mk(today - DAY, today, &[w]),
            "today" | "tonight" => return mk(today, today + DAY, &[w]),
            "recently" | "lately" => return mk(now - 30 * DAY, now + DAY, &[w]),
            "last" | "past" | "previous" => {
                if let Some(m) = month_of(next) {
                    // The most recent such month before the current one.
                    let y = if m < cm { cy } else { cy - 1 };
                    let (s, e) = month_window(y, m);
                    return mk(s, e, &[w, next]);
                }
                match next {
                    "week" => return mk(today - 14 * DAY, today, &[w, next]),
                    "weekend" => return mk(today - 9 * DAY, today, &[w, next]),
                    "month" => {
                        let (py, pm) = if cm == 1 { (cy - 1, 12) } else { (cy, cm - 1) };
                        let (s, e) = month_window(py, pm);
                        return mk(s, e, &[w, next]);
                    }
                    "year" => return mk(month_start(cy - 1, 1), month_start(cy, 1), &[w, next]),
                    "summer" => {
                        let y = if cm > 8 { cy } else { cy - 1 };
                        return mk(month_start(y, 6), month_start(y, 9), &[w, next]);
                    }
                    "winter" => {
                        let y = if cm > 2 { cy } else { cy - 1 };
                        return mk(month_start(y - 1, 12), month_start(y, 3), &[w, next]);
                    }
                    "spring" => {
                        let y = if cm > 5 { cy } else { cy - 1 };
                        return mk(month_start(y, 3), month_start(y, 6), &[w, next]);
                    }
                    "fall" | "autumn" => {
                        let y = if cm > 11 { cy } else { cy - 1 };
                        return mk(month_start(y, 9), month_start(y, 12), &[w, next]);
                    }
                    _ => {}
                }
                // "past few weeks", "last two months": a span ending now.
                if let (Some(n), Some(u)) = (number_of(next), unit_days(next2)) {
                    return mk(now - n * u * DAY, now + DAY, &[w, next, next2]);
                }
            }
            "this" => match next {
                "week" => return mk(today - 7 * DAY, now + DAY, &[w, next]),
                "month" => return mk(month_start(cy, cm), now + DAY, &[w, next]),
                "year" => return mk(month_start(cy, 1), now + DAY, &[w, next]),
                _ => {}
            },
            "ago" if i >= 1 => {
                // "<n> <unit> ago", "a few weeks ago", "a couple of months ago".
                let u = unit_days(words[i - 1]);
                let n = (i >= 2)
                    .then(|| number_of(words[i - 2]))
                    .flatten()
                    .or_else(|| {
                        (i >= 3 && words[i - 2] == "of").then(|| number_of(words[i - 3]))?
                    });
                if let Some(u) = u {
                    let n = n.unwrap_or(1).max(1);
                    let centre = now - n * u * DAY;
                    // Half a unit each side, at least two days: people round.
                    let slack = (u * DAY / 2).max(2 * DAY) * n.min(3);
                    let from = i.saturating_sub(3);
                    return mk(centre - slack, centre + slack, &words[from..=i]);
                }
            }
            _ => {
                if let Some(m) = month_of(w) {
                    // "in May", "in May 2025", "May 2025"; a bare "may" is only a month when
                    // "in"/"of"/"during"/"since" precedes it or a year follows.
                    let year = next
                        .parse::<i64>()
                        .ok()
                        .filter(|y| (1900..=2200).contains(y));
                    let prev = if i > 0 { words[i - 1] } else { "" };
                    let marked = matches!(prev, "in" | "of" | "during" | "early" | "late" | "mid");
                    if w == "may" && year.is_none() && !marked {
                        continue;
                    }
                    if year.is_none() && !marked {
                        continue;
                    }
                    let y = year.unwrap_or(if m <= cm { cy } else { cy - 1 });
                    let (s, e) = month_window(y, m);
                    let phrase: Vec<&str> = if year.is_some() {
                        vec![w, next]
                    } else {
                        vec![prev, w]
                    };
                    return mk(s, e, &phrase);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_utc;

    fn at(s: &str) -> i64 {
        parse_utc(s).unwrap()
    }

    fn win(q: &str, now: &str) -> Option<(String, String)> {
        window(q, at(now)).map(|w| {
            (
                crate::time::rfc3339(w.start)[..10].to_string(),
                crate::time::rfc3339(w.end)[..10].to_string(),
            )
        })
    }

    #[test]
    fn months() {
        let now = "2026-03-15T10:00:00Z";
        assert_eq!(
            win("which book was I reading last May?", now),
            Some(("2025-05-01".into(), "2025-06-01".into()))
        );
        assert_eq!(
            win("what did I cook last February", now),
            Some(("2026-02-01".into(), "2026-03-01".into()))
        );
        assert_eq!(
            win("the trip in January", now),
            Some(("2026-01-01".into(), "2026-02-01".into()))
        );
        assert_eq!(
            win("the trip in October", now),
            Some(("2025-10-01".into(), "2025-11-01".into()))
        );
        assert_eq!(
            win("what happened in December 2024", now),
            Some(("2024-12-01".into(), "2025-01-01".into()))
        );
        assert_eq!(
            win("last month's dentist visit", now),
            Some(("2026-02-01".into(), "2026-03-01".into()))
        );
        assert_eq!(
            win("what did we plan last year", now),
            Some(("2025-01-01".into(), "2026-01-01".into()))
        );
    }

    #[test]
    fn spans() {
        let now = "2026-03-15T10:00:00Z";
        assert_eq!(
            win("what did I buy yesterday", now),
            Some(("2026-03-14".into(), "2026-03-15".into()))
        );
        assert_eq!(
            win("the recipe from two weeks ago", now),
            Some(("2026-02-22".into(), "2026-03-08".into()))
        );
        assert_eq!(
            win("a couple of months ago I said", now),
            Some(("2025-12-15".into(), "2026-02-13".into()))
        );
        assert!(win("three days ago", now).is_some());
        assert!(win("over the past few weeks", now).is_some());
    }

    #[test]
    fn no_dates() {
        let now = "2026-03-15T10:00:00Z";
        for q in [
            "may I ask what my dog's name is",
            "how do I parse a config",
            "what is my sister's job",
            "ago",
            "last",
            "",
        ] {
            assert_eq!(win(q, now), None, "{q}");
        }
    }
}
