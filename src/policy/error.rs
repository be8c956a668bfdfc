//! Why a policy file or a `[[policy]]` rule was refused: the file, the line and the key, as
//! every config error says it. Policy's own type, so policy needs nothing of `config` (which
//! holds the rules in its settings and turns this into a `ConfigError`).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}:{line}: key `{key}`: {message}")]
    Invalid {
        file: String,
        line: usize,
        key: String,
        message: String,
    },
}
