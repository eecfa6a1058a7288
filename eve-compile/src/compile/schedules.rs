//! `schedules/`: a Markdown file per schedule, its cron expression and time zone in front matter
//! and the prompt to run as its body. The cron grammar itself lives in [`crate::cron`].

use eve_discover::{Code, Diagnostic, Named};

use super::Compiler;
use crate::cron::check_cron;
use crate::fields::Fields;
use crate::manifest::*;

impl Compiler {
    pub(super) fn schedule(&mut self, s: &Named) -> Option<Schedule> {
        if super::modules::is_module(&s.file) {
            return self.module_schedule(s);
        }
        let name_ok = self.check_name(&s.name, &s.file.path, "schedule");
        let parsed = self.markdown_file(&s.file)?;
        let mut f = Fields::new(&s.file.path, &parsed.doc, "", &mut self.diags);
        f.unknown_keys(
            &["cron", "timezone", "overlap", "catch_up", "description"],
            "schedule",
        );
        let cron = f.required_string(
            "cron",
            "add front matter `cron: \"0 9 * * *\"` (minute hour day-of-month month day-of-week)",
        );
        let mut ok = cron.is_some();
        if let Some(expr) = &cron
            && let Err(why) = check_cron(expr).and_then(|c| fires_at_all(&c))
        {
            f.report(
                    Code::InvalidCron,
                    "cron",
                    format!("invalid cron expression \"{expr}\": {why}"),
                    "use five fields: minute hour day-of-month month day-of-week, e.g. \"*/15 * * * *\"",
                );
            ok = false;
        }
        let timezone = f.string("timezone").unwrap_or_else(|| "UTC".to_owned());
        if crate::tz::zone(&timezone).is_none() {
            f.report(
                Code::InvalidTimezone,
                "timezone",
                format!("unknown time zone \"{timezone}\""),
                "use an IANA name such as `Europe/Paris` or `UTC`",
            );
            ok = false;
        }
        let overlap = f
            .choice(
                "overlap",
                &[("skip", Overlap::Skip), ("queue", Overlap::Queue)],
            )
            .unwrap_or_default();
        let catch_up = f
            .choice(
                "catch_up",
                &[("none", CatchUp::None), ("latest", CatchUp::Latest)],
            )
            .unwrap_or_default();
        let prompt = parsed.body.trim().to_owned();
        if prompt.is_empty() {
            f.push(
                Diagnostic::new(
                    Code::MissingField,
                    s.file.path.clone(),
                    "schedule has no prompt",
                )
                .help("write the prompt to run below the front matter"),
            );
            ok = false;
        }
        (ok && name_ok).then(|| Schedule {
            name: s.name.clone(),
            source: s.file.path.clone(),
            cron: cron.unwrap_or_default(),
            timezone,
            overlap,
            catch_up,
            prompt,
        })
    }
}

/// Whether a parsed expression names any time at all: `0 0 31 2 *` (February 31st) parses but
/// never fires, which a user would only find out by waiting. Searched from a fixed date, so the
/// build is the same whenever it runs.
pub(super) fn fires_at_all(cron: &croner::Cron) -> Result<(), String> {
    let from = chrono::DateTime::<chrono::Utc>::from_timestamp(946_684_800, 0) // 2000-01-01
        .unwrap_or_default();
    match cron.find_next_occurrence(&from, false) {
        Ok(_) => Ok(()),
        _ => Err(
            "it never fires: no date matches it (such as day 30 or 31 in February, or day 31 \
             in a 30-day month)"
                .to_owned(),
        ),
    }
}
