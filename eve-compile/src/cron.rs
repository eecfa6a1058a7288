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
    let tz: chrono_tz::Tz = schedule.timezone.parse().ok()?;
    let local = after.with_timezone(&tz);
    cron.find_next_occurrence(&local, false)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}
