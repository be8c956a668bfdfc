//! Validating one `[[upstream]]`'s network overrides (`connect_to`, `ca_file`) from the file
//! into [`UpstreamNet`]; `load.rs` reports a failure with the file, line and key.

use super::error::{ConfigError, Ctx};
use super::file::FileUpstream;
use super::net::{read_roots, HostPort, UpstreamNet};
use std::path::{Path, PathBuf};

/// Validates `connect_to` and `ca_file` of one `[[upstream]]`; a relative `ca_file` is taken
/// relative to the directory of the config file.
pub(super) fn upstream_net(
    cx: &Ctx,
    u: &FileUpstream,
    config_file: &str,
) -> Result<UpstreamNet, ConfigError> {
    let mut net = UpstreamNet::default();
    if let Some(c) = &u.connect_to {
        match HostPort::parse(c.get_ref()) {
            Ok(hp) => net.connect_to = Some(hp),
            Err(m) => return cx.err("upstream.connect_to", c.span(), m),
        }
    }
    if let Some(f) = &u.ca_file {
        let mut path = PathBuf::from(f.get_ref());
        if path.is_relative() {
            if let Some(dir) = Path::new(config_file).parent() {
                path = dir.join(path);
            }
        }
        net.extra_roots = match read_roots(&path) {
            Ok(r) => r,
            Err(m) => return cx.err("upstream.ca_file", f.span(), m),
        };
        net.ca_file = Some(path);
    }
    Ok(net)
}
