//! A queued create's replay credential: the caller's `Authorization` and `Cookie` headers,
//! kept as [`HeaderValue`]s (marked sensitive, so they never show in a `Debug` or log) and
//! stored in the keychain, or sealed in PostgreSQL ([`super::sealed`]), as one small JSON
//! object (`{"authorization": …, "cookie": …}`, the form earlier Weirs wrote).

use http::{header, HeaderMap, HeaderValue};

/// What a replay (or an in-doubt lookup) sends as the caller.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Credential {
    pub authorization: Option<HeaderValue>,
    pub cookie: Option<HeaderValue>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("authorization", &self.authorization.as_ref().map(|_| "…"))
            .field("cookie", &self.cookie.as_ref().map(|_| "…"))
            .finish()
    }
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Stored {
    #[serde(default)]
    authorization: Option<String>,
    #[serde(default)]
    cookie: Option<String>,
}

fn sensitive(v: &str) -> Option<HeaderValue> {
    let mut v = HeaderValue::from_str(v).ok()?;
    v.set_sensitive(true);
    Some(v)
}

impl Credential {
    /// The request's `Authorization` and cookies (HTTP/2 clients may split cookies into
    /// several headers; the replay needs them all, joined). `None` when it has neither.
    pub fn from_headers(h: &HeaderMap) -> Option<Credential> {
        let authorization = h
            .get(header::AUTHORIZATION)
            .and_then(|v| sensitive(v.to_str().ok()?));
        let cookies: Vec<&str> = h
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let cookie = (!cookies.is_empty())
            .then(|| sensitive(&cookies.join("; ")))
            .flatten();
        let c = Credential {
            authorization,
            cookie,
        };
        (c != Credential::default()).then_some(c)
    }

    /// `Authorization: {value}` alone (the stored GitHub token standing in for a lookup).
    pub fn authorization(value: HeaderValue) -> Credential {
        let mut value = value;
        value.set_sensitive(true);
        Credential {
            authorization: Some(value),
            cookie: None,
        }
    }

    /// The secret as kept in the keychain or sealed.
    pub fn to_secret(&self) -> String {
        let text =
            |v: &Option<HeaderValue>| v.as_ref().and_then(|v| v.to_str().ok()).map(String::from);
        let stored = Stored {
            authorization: text(&self.authorization),
            cookie: text(&self.cookie),
        };
        serde_json::to_string(&stored).unwrap_or_default()
    }

    /// Reads a kept secret. An entry that does not parse, or whose values are not header
    /// values, gives an empty credential (the replay then goes without, as before).
    pub fn from_secret(secret: &str) -> Credential {
        let stored: Stored = serde_json::from_str(secret).unwrap_or_default();
        Credential {
            authorization: stored.authorization.as_deref().and_then(sensitive),
            cookie: stored.cookie.as_deref().and_then(sensitive),
        }
    }

    /// Sets the credential's headers on a replayed request (replacing any there).
    pub fn apply_to(&self, h: &mut HeaderMap) {
        if let Some(v) = &self.authorization {
            h.insert(header::AUTHORIZATION, v.clone());
        }
        if let Some(v) = &self.cookie {
            h.insert(header::COOKIE, v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_the_stored_form_and_reads_older_entries() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("token a"));
        h.append(header::COOKIE, HeaderValue::from_static("s=1"));
        h.append(header::COOKIE, HeaderValue::from_static("t=2"));
        let c = Credential::from_headers(&h).unwrap();
        assert_eq!(
            c.to_secret(),
            r#"{"authorization":"token a","cookie":"s=1; t=2"}"#
        );
        assert_eq!(Credential::from_secret(&c.to_secret()), c);
        assert!(c.authorization.as_ref().unwrap().is_sensitive());
        assert!(!format!("{c:?}").contains("token a"));
        // What earlier Weirs wrote (nulls included), and junk.
        let old = Credential::from_secret(r#"{"authorization":"token b","cookie":null}"#);
        assert_eq!(old.authorization.unwrap(), "token b");
        assert_eq!(Credential::from_secret("not json"), Credential::default());
        assert_eq!(Credential::from_headers(&HeaderMap::new()), None);

        let mut out = HeaderMap::new();
        c.apply_to(&mut out);
        assert_eq!(out[header::COOKIE], "s=1; t=2");
    }
}
