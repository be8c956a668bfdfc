//! A secret string: zeroised when dropped, never shown by `Debug` or `Display`.

use std::fmt;

use zeroize::{Zeroize, Zeroizing};

/// A credential in memory. Read it with [`Secret::expose`] at the one place it is sent; `Debug`
/// prints `Secret(***)` so it cannot leak through logs or error messages by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// Takes ownership of `value`; its buffer is wiped when the `Secret` is dropped.
    pub fn new(value: String) -> Self {
        Secret(Zeroizing::new(value))
    }

    /// The secret text. Named so that every read stands out in review.
    pub fn expose(&self) -> &str {
        self.0.as_str()
    }

    /// Moves the text out, e.g. to hand it to an API that takes `String`. The caller then owns
    /// the only copy and the duty to keep it out of logs.
    pub fn into_inner(mut self) -> String {
        std::mem::take(&mut *self.0)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret::new(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret::new(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl Zeroize for Secret {
    fn zeroize(&mut self) {
        self.0.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_value() {
        let s = Secret::from("gho_topsecret");
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert!(!format!("{:?}", Some(&s)).contains("topsecret"));
        assert_eq!(s.expose(), "gho_topsecret");
    }

    #[test]
    fn zeroize_wipes_the_text() {
        let mut s = Secret::from("gho_topsecret");
        s.zeroize();
        assert_eq!(s.expose(), "");
    }

    #[test]
    fn into_inner_moves_the_text_out() {
        assert_eq!(Secret::from("abc").into_inner(), "abc");
    }
}
