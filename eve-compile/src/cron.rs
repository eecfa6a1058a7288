//! Cron expressions of schedules: the check `eve build` runs (five fields or a nickname, each number
//! within its field's range, named when it is not) and the next fire time the runtime schedules.
//! Both use one parser configuration, so what builds is what runs.

use crate::manifest::Schedule;

/// Checks a five-field cron expression (or a nickname such as `@daily`).
pub fn check_cron(expr: &str) -> Result<croner::Cron, String> {
    let trimmed = expr.trim();
    let fields = trimmed.split_whitespace().count();
    if !trimmed.starts_with('@') && fields != 5 {
        return Err(format!("expected 5 fields, found {fields}"));
    }
    if !trimmed.starts_with('@') {
        check_cron_ranges(trimmed)?;
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .build()
        .parse(trimmed)
        .map_err(|e| e.to_string())
}

/// Names the first number outside its field's range (croner only says "out of bounds").
fn check_cron_ranges(expr: &str) -> Result<(), String> {
    const FIELDS: [(&str, u32, u32); 5] = [
        ("minute", 0, 59),
        ("hour", 0, 23),
        ("day-of-month", 1, 31),
        ("month", 1, 12),
        ("day-of-week", 0, 7),
    ];
    for (field, (what, lo, hi)) in expr.split_whitespace().zip(FIELDS) {
        for part in field.split(',') {
            // `a-b/step`: the step is a count, not a value of the field.
            let values = part.split('/').next().unwrap_or(part);
            for v in values.split('-') {
                if let Ok(n) = v.parse::<u32>()
                    && (n < lo || n > hi)
                {
                    return Err(format!("{what} `{n}` is out of range {lo}-{hi}"));
                }
            }
        }
    }
    Ok(())
}

/// The next time a schedule fires strictly after `after`, in UTC.
pub fn next_fire(
    schedule: &Schedule,
    after: chrono::DateTime<chrono::Utc>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let cron = check_cron(&schedule.cron).ok()?;
    let tz = crate::tz::zone(&schedule.timezone)?;
    let local = after.with_timezone(&tz);
    cron.find_next_occurrence(&local, false)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration, LocalResult, Offset, TimeZone, Utc};

    use super::*;

    /// Zones with the awkward cases: daylight saving both ways and both hemispheres, a 30-minute
    /// shift (Lord Howe), a 45-minute offset (Chatham), a zone that suspends DST for Ramadan
    /// (Casablanca), one with none at all.
    const ZONES: &[&str] = &[
        "UTC",
        "Europe/Paris",
        "Europe/London",
        "America/New_York",
        "America/Sao_Paulo",
        "America/Santiago",
        "Australia/Lord_Howe",
        "Pacific/Chatham",
        "Africa/Casablanca",
        "Asia/Kolkata",
    ];

    fn schedule(cron: &str, zone: &str) -> Schedule {
        serde_json::from_value(serde_json::json!({
            "name": "s", "source": "schedules/s.md", "cron": cron, "timezone": zone, "prompt": "p",
            "overlap": "skip", "catch_up": "latest",
        }))
        .expect("a schedule")
    }

    /// `next_fire` as it was with chrono-tz's zones: the reference.
    fn next_fire_chrono_tz(cron: &str, zone: &str, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let cron = check_cron(cron).ok()?;
        let tz: chrono_tz::Tz = zone.parse().ok()?;
        cron.find_next_occurrence(&after.with_timezone(&tz), false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    #[test]
    fn offsets_match_chrono_tz_hour_by_hour_across_two_years() {
        let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut compared = 0;
        for name in ZONES {
            let ours = crate::tz::zone(name).expect(name);
            let theirs: chrono_tz::Tz = name.parse().unwrap();
            for hour in 0..(2 * 366 * 24) {
                let t = start + Duration::minutes(hour * 60 + 30);
                assert_eq!(
                    ours.offset_from_utc_datetime(&t.naive_utc()).fix(),
                    theirs.offset_from_utc_datetime(&t.naive_utc()).fix(),
                    "{name} at {t}"
                );
                // The same wall-clock time read back: single, skipped or shown twice.
                let local = t.naive_utc();
                let mine = ours.offset_from_local_datetime(&local).map(|o| o.fix());
                let reference = theirs.offset_from_local_datetime(&local).map(|o| o.fix());
                assert_eq!(
                    format!("{mine:?}"),
                    format!("{reference:?}"),
                    "{name}, local {local}"
                );
                compared += 1;
            }
        }
        eprintln!("{compared} instants compared with chrono-tz");
    }

    #[test]
    fn next_fire_matches_chrono_tz_through_the_clock_changes() {
        let crons = [
            "0 2 * * *",
            "30 1 * * *",
            "*/15 * * * *",
            "0 0 1 * *",
            "0 9 * * 1-5",
        ];
        let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 7, 0).unwrap();
        let mut compared = 0;
        for zone in ZONES {
            for cron in crons {
                let s = schedule(cron, zone);
                let mut after = start;
                // Every fire of the year for the daily ones; a fire every 53 hours otherwise.
                while after < start + Duration::days(366) {
                    let ours = next_fire(&s, after);
                    assert_eq!(
                        ours,
                        next_fire_chrono_tz(cron, zone, after),
                        "{zone} `{cron}` after {after}"
                    );
                    let Some(next) = ours else { break };
                    after = if cron.starts_with("*/") {
                        after + Duration::hours(53)
                    } else {
                        next
                    };
                    compared += 1;
                }
            }
        }
        eprintln!("{compared} next fires compared with chrono-tz");
        assert!(compared > 10_000, "{compared}");
    }

    #[test]
    fn unknown_zones_are_refused_and_names_are_exact() {
        assert!(crate::tz::zone("Mars/Olympus").is_none());
        assert!(crate::tz::zone("").is_none());
        assert!(crate::tz::zone("../../etc/passwd").is_none());
        assert!(matches!(
            crate::tz::zone("Europe/Paris").map(|z| z.offset_from_local_datetime(
                &chrono::NaiveDate::from_ymd_opt(2026, 3, 29)
                    .unwrap()
                    .and_hms_opt(2, 30, 0)
                    .unwrap()
            )),
            Some(LocalResult::None)
        ));
    }
}
