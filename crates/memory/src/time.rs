//! Clock times as memories show them: Unix milliseconds to and from RFC 3339 (UTC).

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's civil-from-days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// (year, month, day) → days since 1970-01-01.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix milliseconds → RFC 3339 (`2026-11-22T19:38:24.123Z`).
pub fn rfc3339(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, mo, d) = civil(days);
    let s = rem / 1000;
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        rem % 1000
    )
}

/// Parses `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM[:SS[.fff]][Z]` (UTC) into Unix milliseconds;
/// `None` when `s` is not such a date.
pub fn parse_utc(s: &str) -> Option<i64> {
    let s2 = s.trim().trim_end_matches('Z');
    let (date, time) = s2.split_once(['T', ' ']).unwrap_or((s2, ""));
    let p: Vec<&str> = date.split('-').collect();
    if p.len() != 3 || p[0].len() != 4 {
        return None;
    }
    let y: i64 = p[0].parse().ok()?;
    let m: u32 = p[1].parse().ok()?;
    let d: u32 = p[2].parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let mut secs = 0f64;
    if !time.is_empty() {
        let t: Vec<&str> = time.split(':').collect();
        if t.len() < 2 || t.len() > 3 {
            return None;
        }
        let h: f64 = t[0].parse().ok()?;
        let mi: f64 = t[1].parse().ok()?;
        let se: f64 = match t.get(2) {
            Some(x) => x.parse().ok()?,
            None => 0.0,
        };
        if !(0.0..24.0).contains(&h) || !(0.0..60.0).contains(&mi) || !(0.0..61.0).contains(&se) {
            return None;
        }
        secs = h * 3600.0 + mi * 60.0 + se;
    }
    Some(days_from_civil(y, m, d) * 86_400_000 + (secs * 1000.0).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        let t = parse_utc("2026-11-22T19:38:24Z").unwrap();
        assert_eq!(rfc3339(t), "2026-11-22T19:38:24.000Z");
        assert_eq!(
            parse_utc("2024-02-29").unwrap(),
            days_from_civil(2024, 2, 29) * 86_400_000
        );
        assert_eq!(
            rfc3339(parse_utc("2000-03-01").unwrap()),
            "2000-03-01T00:00:00.000Z"
        );
        for bad in ["yesterday", "2026-13-01", "2026-1-1x", "2026-11-22T25:00"] {
            assert!(parse_utc(bad).is_none(), "{bad}");
        }
    }
}
