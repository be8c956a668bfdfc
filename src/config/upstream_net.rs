//! Validating one `[[upstream]]`'s network overrides (`connect_to`, `ca_file`) from the file
//! into [`UpstreamNet`]; `load.rs` reports a failure with the file, line and key.

use super::file::FileUpstream;
use super::net::{read_roots, HostPort, UpstreamNet};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A validation failure: which key, where in the file, and what is wrong.
pub(super) struct NetError {
    pub key: &'static str,
    pub span: Range<usize>,
    pub message: String,
}

/// Validates `connect_to` and `ca_file` of one `[[upstream]]`; a relative `ca_file` is taken
/// relative to the directory of the config file.
pub(super) fn upstream_net(u: &FileUpstream, config_file: &str) -> Result<UpstreamNet, NetError> {
    let mut net = UpstreamNet::default();
    if let Some(c) = &u.connect_to {
        net.connect_to = Some(HostPort::parse(c.get_ref()).map_err(|message| NetError {
            key: "upstream.connect_to",
            span: c.span(),
            message,
        })?);
    }
    if let Some(f) = &u.ca_file {
        let err = |message| NetError {
            key: "upstream.ca_file",
            span: f.span(),
            message,
        };
        let mut path = PathBuf::from(f.get_ref());
        if path.is_relative() {
            if let Some(dir) = Path::new(config_file).parent() {
                path = dir.join(path);
            }
        }
        net.extra_roots = read_roots(&path).map_err(err)?;
        net.ca_file = Some(path);
    }
    Ok(net)
}
