//! A bound on how deeply a config file nests arrays and inline tables, checked before the TOML
//! parser sees the text: the parser recurses once per level, and a file of about a hundred `[`
//! overflowed a 2 MiB thread's stack in a debug build (found by the `config` fuzz target,
//! kept in fuzz/artifacts/config/). Weir's own keys nest at most three deep.

/// Far deeper than any Weir config, far shallower than what the parser's stack can take.
pub(super) const MAX_DEPTH: usize = 16;

/// The byte offset where nesting first goes past [`MAX_DEPTH`] (strings and comments aside).
pub(super) fn too_deep(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let (mut i, mut depth) = (0, 0usize);
    while i < b.len() {
        match b[i] {
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            q @ (b'"' | b'\'') => {
                i = after_string(b, i, q);
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The offset just past the string opening at `start` with quote `q` (basic strings take
/// backslash escapes; a one-line string also ends at its line's end).
fn after_string(b: &[u8], start: usize, q: u8) -> usize {
    let triple = b[start..].starts_with(&[q; 3]);
    let mut i = start + if triple { 3 } else { 1 };
    while i < b.len() {
        if q == b'"' && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if triple && b[i..].starts_with(&[q; 3]) {
            return i + 3;
        }
        if !triple && (b[i] == q || b[i] == b'\n') {
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_nesting_is_found_and_strings_and_comments_are_not_counted() {
        let deep = format!("re = {}", "[".repeat(MAX_DEPTH + 1));
        assert_eq!(too_deep(&deep), Some(5 + MAX_DEPTH));
        let fine = format!(
            "[[upstream]]\nname = \"{0}\"\n# {0}\nx = '''{0}'''\ny = [[1], {{a = [2]}}]\n",
            "[".repeat(100)
        );
        assert_eq!(too_deep(&fine), None);
    }
}
