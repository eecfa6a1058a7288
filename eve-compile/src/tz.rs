//! Time zones of schedules: IANA names (`Europe/Paris`) resolved with jiff's time zone database
//! (the system's `/usr/share/zoneinfo`, else the copy built into eve, so a server without tzdata
//! knows every zone a build accepted), offered to croner as a chrono [`TimeZone`].
//!
//! Not chrono-tz: its tables are a megabyte of pointers that every eve process had to relocate,
//! page by page, before `main` (a third of the start-up of `eve build`); jiff keeps its copy of the
//! database as bytes, read only when a zone is asked for. `cron::tests` checks this against
//! chrono-tz across the daylight-saving changes of several zones.

use chrono::{
    Datelike, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone,
    Timelike, Utc,
};
use jiff::tz::AmbiguousOffset;

/// An IANA time zone.
#[derive(Clone, Debug)]
pub struct Zone(jiff::tz::TimeZone);

/// The offset of a [`Zone`] at some instant (it keeps its zone, as chrono asks of an offset).
#[derive(Clone, Debug)]
pub struct ZoneOffset {
    zone: Zone,
    fixed: FixedOffset,
}

/// The zone `name` names, when the database knows it.
pub fn zone(name: &str) -> Option<Zone> {
    jiff::tz::db().get(name).ok().map(Zone)
}

impl Zone {
    fn offset(&self, offset: jiff::tz::Offset) -> ZoneOffset {
        ZoneOffset {
            zone: self.clone(),
            // jiff's offsets reach ±25:59:59, chrono's ±23:59:59: the (never seen) rest is
            // clamped.
            fixed: FixedOffset::east_opt(offset.seconds().clamp(-86_399, 86_399))
                .unwrap_or_else(|| Utc.fix()),
        }
    }
}

impl Offset for ZoneOffset {
    fn fix(&self) -> FixedOffset {
        self.fixed
    }
}

impl std::fmt::Display for ZoneOffset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.fixed.fmt(f)
    }
}

/// `local` as jiff's civil date-time; `None` outside jiff's range (years -9999 to 9999).
fn civil(local: &NaiveDateTime) -> Option<jiff::civil::DateTime> {
    let narrow = |n: u32| i8::try_from(n).ok();
    jiff::civil::DateTime::new(
        i16::try_from(local.year()).ok()?,
        narrow(local.month())?,
        narrow(local.day())?,
        narrow(local.hour())?,
        narrow(local.minute())?,
        narrow(local.second())?,
        // A leap second (chrono's nanosecond ≥ 1e9) is read as the last nanosecond before it.
        i32::try_from(local.nanosecond().min(999_999_999)).ok()?,
    )
    .ok()
}

impl TimeZone for Zone {
    type Offset = ZoneOffset;

    fn from_offset(offset: &ZoneOffset) -> Self {
        offset.zone.clone()
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> LocalResult<ZoneOffset> {
        self.offset_from_local_datetime(&local.and_time(NaiveTime::MIN))
    }

    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> LocalResult<ZoneOffset> {
        let Some(civil) = civil(local) else {
            return LocalResult::None;
        };
        match self.0.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => LocalResult::Single(self.offset(offset)),
            // A time the clocks skipped (spring forward) exists in no offset.
            AmbiguousOffset::Gap { .. } => LocalResult::None,
            // A time the clocks showed twice (fall back): the earlier instant first.
            AmbiguousOffset::Fold { before, after } => {
                LocalResult::Ambiguous(self.offset(before), self.offset(after))
            }
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> ZoneOffset {
        self.offset_from_utc_datetime(&utc.and_time(NaiveTime::MIN))
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> ZoneOffset {
        let utc = utc.and_utc();
        let instant = jiff::Timestamp::new(
            utc.timestamp(),
            i32::try_from(utc.timestamp_subsec_nanos().min(999_999_999)).unwrap_or(0),
        )
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        self.offset(self.0.to_offset(instant))
    }
}
