//! When a catalog record was made or last used: one type, [`Timestamp`] (whole seconds
//! since the Unix epoch, UTC), for every time the catalog keeps.
//!
//! Records store it in the form each field has had on disk since it was added, so an
//! existing catalog reads and writes the same bytes: `created_at` fields as ISO 8601
//! text, `2026-01-01T00:00:00Z` (`#[serde(with = "crate::time::iso_text")]`), a user's
//! `date_joined` and a key's `last_used` as integers (the type's own serde form). The
//! facade shows each as the hosted service does (`Timestamp::iso`,
//! `Timestamp::unix_seconds`).

use serde::{Deserialize, Serialize};

/// A time in whole seconds since 1970-01-01T00:00:00Z.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(i64);

/// The text form's layout: ISO 8601 UTC to the second.
const ISO: &str = "%Y-%m-%dT%H:%M:%SZ";

impl Timestamp {
    /// Now, to the second.
    pub fn now() -> Timestamp {
        Timestamp(chrono::Utc::now().timestamp())
    }

    /// The time `seconds` after the Unix epoch.
    pub fn from_unix_seconds(seconds: i64) -> Timestamp {
        Timestamp(seconds)
    }

    /// Seconds since the Unix epoch.
    pub fn unix_seconds(self) -> i64 {
        self.0
    }

    /// ISO 8601 UTC to the second (`2026-01-01T00:00:00Z`). A time chrono cannot
    /// represent (only a damaged catalog holds one) shows as the epoch.
    pub fn iso(self) -> String {
        chrono::DateTime::from_timestamp(self.0, 0)
            .unwrap_or_default()
            .format(ISO)
            .to_string()
    }

    /// Reads the text form. Empty text (records made by tests before the type existed)
    /// is the epoch; RFC 3339 with an offset is read too.
    pub fn parse_iso(text: &str) -> Option<Timestamp> {
        if text.is_empty() {
            return Some(Timestamp(0));
        }
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(text, ISO) {
            return Some(Timestamp(t.and_utc().timestamp()));
        }
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| Timestamp(t.timestamp()))
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.iso())
    }
}

/// The serde form of `created_at` fields: ISO 8601 text.
pub mod iso_text {
    use super::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `t` as ISO 8601 text.
    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.iso())
    }

    /// Reads ISO 8601 text.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        Timestamp::parse_iso(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("{} is not an ISO 8601 time", crate::shown(&text)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Record {
        #[serde(with = "iso_text")]
        created_at: Timestamp,
        last_used: Option<Timestamp>,
    }

    #[test]
    fn each_field_keeps_its_stored_form() -> Result<(), serde_json::Error> {
        let stored = r#"{"created_at":"2026-03-04T05:06:07Z","last_used":1772600767}"#;
        let r: Record = serde_json::from_str(stored)?;
        assert_eq!(r.created_at.unix_seconds(), 1_772_600_767);
        assert_eq!(r.last_used, Some(r.created_at));
        assert_eq!(serde_json::to_string(&r)?, stored);
        assert_eq!(r.created_at.to_string(), "2026-03-04T05:06:07Z");
        Ok(())
    }

    #[test]
    fn odd_text_forms() {
        assert_eq!(Timestamp::parse_iso(""), Some(Timestamp(0)));
        assert_eq!(
            Timestamp::parse_iso("2026-03-04T07:06:07+02:00"),
            Timestamp::parse_iso("2026-03-04T05:06:07Z")
        );
        assert_eq!(Timestamp::parse_iso("yesterday"), None);
        assert!(serde_json::from_str::<Record>(r#"{"created_at":"x","last_used":null}"#).is_err());
    }
}
