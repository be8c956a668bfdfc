//! The `"model"` of a completion request's JSON body, and the same body with only that value
//! replaced. The rewrite splices the new string into the original bytes where the old one
//! stood: every other byte (key order, spacing, number spelling, unicode escapes) is sent as
//! the client wrote it, so the fallback request means exactly what the first one meant.

use bytes::Bytes;
use serde::de::IgnoredAny;
use std::ops::Range;

/// The model a body names, and where its JSON string stands in the body.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct NamedModel {
    pub model: String,
    span: Range<usize>,
}

/// The top-level `"model"` string of a JSON object body. `None` when the body is not a JSON
/// object, has no top-level `"model"`, names it more than once (ambiguous: which one would the
/// upstream read?), or its value is not a string.
pub(super) fn find(body: &[u8]) -> Option<NamedModel> {
    // One full parse first: the scan below may then trust the structure.
    serde_json::from_slice::<IgnoredAny>(body).ok()?;
    let mut pos = skip_ws(body, 0);
    if body.get(pos) != Some(&b'{') {
        return None;
    }
    pos += 1;
    let mut found: Option<NamedModel> = None;
    loop {
        pos = skip_ws(body, pos);
        if body.get(pos) == Some(&b'}') {
            return found;
        }
        let (key, end) = value_at::<String>(body, pos)?;
        pos = skip_ws(body, end);
        if body.get(pos) != Some(&b':') {
            return None;
        }
        let start = skip_ws(body, pos + 1);
        let (_, end) = value_at::<IgnoredAny>(body, start)?;
        if key == "model" {
            if found.is_some() {
                return None;
            }
            let model = serde_json::from_slice::<String>(&body[start..end]).ok()?;
            found = Some(NamedModel {
                model,
                span: start..end,
            });
        }
        pos = skip_ws(body, end);
        match body.get(pos) {
            Some(b',') => pos += 1,
            Some(b'}') => return found,
            _ => return None,
        }
    }
}

/// `body` with the model string replaced by `to` (JSON-escaped).
pub(super) fn rewrite(body: &[u8], named: &NamedModel, to: &str) -> Bytes {
    let quoted = serde_json::to_string(to).unwrap_or_else(|_| "\"\"".into());
    let mut out = Vec::with_capacity(body.len() + quoted.len());
    out.extend_from_slice(&body[..named.span.start]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[named.span.end..]);
    Bytes::from(out)
}

/// One JSON value of type `T` starting at `pos`, and the offset just after it.
fn value_at<'de, T: serde::Deserialize<'de>>(body: &'de [u8], pos: usize) -> Option<(T, usize)> {
    let mut it = serde_json::Deserializer::from_slice(body.get(pos..)?).into_iter::<T>();
    let v = it.next()?.ok()?;
    Some((v, pos + it.byte_offset()))
}

fn skip_ws(body: &[u8], mut pos: usize) -> usize {
    while matches!(body.get(pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        pos += 1;
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_rewrites_only_the_model() {
        let body = br#" { "messages": [{"role":"user","content":"model: \"x\""}], "model" : "claude-sonnet-4.5", "stream":true, "n": 1.50 } "#;
        let m = find(body).unwrap();
        assert_eq!(m.model, "claude-sonnet-4.5");
        let out = rewrite(body, &m, "gpt-5");
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#" { "messages": [{"role":"user","content":"model: \"x\""}], "model" : "gpt-5", "stream":true, "n": 1.50 } "#
        );
        // Nested "model" keys are not the request's model.
        let nested = br#"{"metadata":{"model":"a"},"model":"b"}"#;
        assert_eq!(find(nested).unwrap().model, "b");
        let escaped = br#"{"model":"gpt\u002d5"}"#;
        assert_eq!(find(escaped).unwrap().model, "gpt-5");
    }

    #[test]
    fn no_model_when_absent_ambiguous_or_not_json() {
        assert_eq!(find(br#"{"messages":[]}"#), None);
        assert_eq!(find(br#"{"model":"a","model":"b"}"#), None);
        assert_eq!(find(br#"{"model":7}"#), None);
        assert_eq!(find(br#"["model","a"]"#), None);
        assert_eq!(find(b"model=a"), None);
        assert_eq!(find(br#"{"model":"a""#), None);
        assert_eq!(find(b""), None);
    }
}
