//! Maintenance windows as times: when each opens and closes, and the first one an update fits in. Pure
//! and a leaf: the gate ([`super::gate`]) and the status checks read it.

use jiff::{SignedDuration, Timestamp, civil, tz::TimeZone};

use crate::api::{MaintenanceWindow, Weekday};

/// How far ahead windows are looked for.
const LOOK_AHEAD_DAYS: i64 = 15;

fn weekday(w: Weekday) -> civil::Weekday {
    match w {
        Weekday::Mon => civil::Weekday::Monday,
        Weekday::Tue => civil::Weekday::Tuesday,
        Weekday::Wed => civil::Weekday::Wednesday,
        Weekday::Thu => civil::Weekday::Thursday,
        Weekday::Fri => civil::Weekday::Friday,
        Weekday::Sat => civil::Weekday::Saturday,
        Weekday::Sun => civil::Weekday::Sunday,
    }
}

/// Why a window cannot be read, if one cannot (the CRD checks its shape; the time zone is checked here).
pub fn problem(windows: &[MaintenanceWindow]) -> Option<String> {
    windows.iter().find_map(|w| {
        TimeZone::get(&w.time_zone)
            .err()
            .map(|_| {
                format!(
                    "maintenance window at {}: unknown time zone {:?}",
                    w.start, w.time_zone
                )
            })
            .or_else(|| {
                parse_start(&w.start)
                    .is_none()
                    .then(|| format!("maintenance window: start {:?} is not HH:MM", w.start))
            })
    })
}

fn parse_start(s: &str) -> Option<(i8, i8)> {
    let (h, m) = s.split_once(':')?;
    let (h, m): (i8, i8) = (h.parse().ok()?, m.parse().ok()?);
    ((0..24).contains(&h) && (0..60).contains(&m)).then_some((h, m))
}

/// Every opening of `windows` from a day before `now` to [`LOOK_AHEAD_DAYS`] after: (start, end), by start.
fn openings(windows: &[MaintenanceWindow], now: Timestamp) -> Vec<(Timestamp, Timestamp)> {
    let mut out = vec![];
    for w in windows {
        let (Ok(tz), Some((h, m))) = (TimeZone::get(&w.time_zone), parse_start(&w.start)) else {
            continue;
        };
        let today = now.to_zoned(tz.clone()).date();
        let length = SignedDuration::from_mins(w.duration_minutes.max(1));
        // Back as far as the longest window (a week) reaches, and ahead.
        for offset in -8..=LOOK_AHEAD_DAYS {
            let Ok(date) = today.checked_add(jiff::Span::new().days(offset)) else {
                continue;
            };
            if !w.days.is_empty() && !w.days.iter().any(|d| weekday(*d) == date.weekday()) {
                continue;
            }
            let Ok(start) = date.at(h, m, 0, 0).to_zoned(tz.clone()) else {
                continue;
            };
            let start = start.timestamp();
            if let Ok(end) = start.checked_add(length) {
                out.push((start, end));
            }
        }
    }
    out.sort();
    out
}

/// When an update that keeps its pipelines paused `need` seconds may start its first change: `Ok(now)`
/// inside a window with that much left, else the start of the first window in which it fits (a need
/// longer than a window counts as that window's length: the update starts at its opening). `Err` when no
/// window opens in the next days.
pub fn fit(windows: &[MaintenanceWindow], now: Timestamp, need: i64) -> Result<Timestamp, String> {
    for (start, end) in openings(windows, now) {
        if end <= now {
            continue;
        }
        let from = start.max(now);
        let length = end.duration_since(start).as_secs();
        let need = SignedDuration::from_secs(need.clamp(0, length));
        if end.duration_since(from) >= need {
            return Ok(from);
        }
    }
    Err(format!(
        "no maintenance window opens in the next {LOOK_AHEAD_DAYS} days"
    ))
}

/// A time as people read it, in UTC.
pub fn when(t: Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(days: &[Weekday], start: &str, minutes: i64, tz: &str) -> MaintenanceWindow {
        MaintenanceWindow {
            days: days.to_vec(),
            start: start.into(),
            duration_minutes: minutes,
            time_zone: tz.into(),
        }
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_window_is_open_closed_or_too_short_for_what_is_left() {
        // Saturdays 22:00-02:00 in Rome (UTC+1 in winter): 21:00-01:00 UTC.
        let w = [window(&[Weekday::Sat], "22:00", 240, "Europe/Rome")];
        // 2026-12-05 is a Saturday.
        assert_eq!(
            fit(&w, t("2026-12-05T21:30:00Z"), 0),
            Ok(t("2026-12-05T21:30:00Z"))
        );
        assert_eq!(
            fit(&w, t("2026-12-05T20:00:00Z"), 0),
            Ok(t("2026-12-05T21:00:00Z"))
        );
        // Past midnight it is still Saturday's window.
        assert_eq!(
            fit(&w, t("2026-12-06T00:30:00Z"), 0),
            Ok(t("2026-12-06T00:30:00Z"))
        );
        // 30 minutes left, an hour needed: next Saturday.
        assert_eq!(
            fit(&w, t("2026-12-06T00:30:00Z"), 3600),
            Ok(t("2026-12-12T21:00:00Z"))
        );
        // A need longer than the window starts at its opening.
        assert_eq!(
            fit(&w, t("2026-12-06T00:30:00Z"), 10 * 3600),
            Ok(t("2026-12-12T21:00:00Z"))
        );
        // Summer time: 22:00 in Rome is 20:00 UTC (2027-06-05 is a Saturday).
        assert_eq!(
            fit(&w, t("2027-06-05T12:00:00Z"), 0),
            Ok(t("2027-06-05T20:00:00Z"))
        );
    }

    #[test]
    fn every_day_windows_and_bad_time_zones() {
        let w = [window(&[], "03:00", 60, "UTC")];
        assert_eq!(
            fit(&w, t("2026-12-03T11:00:00Z"), 0),
            Ok(t("2026-12-04T03:00:00Z"))
        );
        assert_eq!(
            fit(&[], t("2026-12-03T11:00:00Z"), 0).map(|_| ()),
            Err(format!(
                "no maintenance window opens in the next {LOOK_AHEAD_DAYS} days"
            ))
        );
        let bad = [window(&[], "03:00", 60, "Mars/Olympus")];
        assert!(
            problem(&bad).unwrap().contains("unknown time zone"),
            "{:?}",
            problem(&bad)
        );
        assert_eq!(problem(&w), None);
    }

    /// A start is HH:MM on a 24-hour clock: an hour or a minute out of range is said, not wrapped.
    #[test]
    fn a_start_out_of_the_clock_is_a_problem() {
        for start in ["24:00", "23:60", "7", "ab:cd"] {
            let w = [window(&[], start, 60, "UTC")];
            assert!(
                problem(&w).is_some_and(|p| p.contains("is not HH:MM")),
                "{start}: {:?}",
                problem(&w)
            );
        }
        for start in ["00:00", "23:59"] {
            assert_eq!(problem(&[window(&[], start, 60, "UTC")]), None, "{start}");
        }
    }
}
