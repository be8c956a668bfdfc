//! How a Weir process finds its settings — one rule for `weir serve`, the `weir` CLI
//! commands and the tray: the given file, else the OS config file if it exists, else the
//! built-in defaults; `--listen` overrides the file; the data dir comes from the flag, else the
//! file, else the OS data dir.
//!
//! [`LaunchArgs`] are those three flags as clap definitions: `weir serve` flattens them in and
//! the tray parses them with [`LaunchArgs::parse_from_args`] (or [`TrayArgs`]).

use super::{load_file, ConfigError, Settings};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// `--config`, `--listen`, `--data-dir`: how every Weir process is launched.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchArgs {
    /// Config file (default: the OS config dir's weir/config.toml if present).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on, overriding the config file (loopback only).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Data directory (default: the OS data dir's weir/).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// The tray's command line: the launch flags and nothing else.
#[derive(clap::Parser, Debug, Clone, Default, PartialEq, Eq)]
#[command(
    name = "weir-tray",
    version,
    about = "Runs Weir's proxy with a tray icon. Options as for `weir serve`."
)]
pub struct TrayArgs {
    #[command(flatten)]
    pub launch: LaunchArgs,
}

impl LaunchArgs {
    /// Parses the arguments after the program name (`std::env::args().skip(1)`), in the
    /// `--opt value` or `--opt=value` form. Unknown arguments are errors, except the `-psn_…`
    /// argument macOS launchers add. `--help`/`--version` come back as errors of kind
    /// `DisplayHelp`/`DisplayVersion` whose text is the help or version.
    pub fn parse_from_args<I, T>(args: I) -> Result<LaunchArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString>,
    {
        let args = args
            .into_iter()
            .map(Into::into)
            .filter(|a| !a.to_string_lossy().starts_with("-psn_"));
        let tray = <TrayArgs as clap::Parser>::try_parse_from(
            std::iter::once(std::ffi::OsString::from("weir-tray")).chain(args),
        )?;
        Ok(tray.launch)
    }

    /// Settings, data dir and config file by [`resolve`].
    pub fn resolve(&self) -> Result<Launch, ConfigError> {
        resolve(
            self.config.as_deref(),
            self.listen,
            self.data_dir.as_deref(),
        )
    }
}

/// Resolved start-up settings.
#[derive(Debug, Clone)]
pub struct Launch {
    pub settings: Settings,
    pub data_dir: PathBuf,
    /// Where the dashboard saves settings: the given file, else the OS default location.
    pub config_file: Option<PathBuf>,
}

/// Settings, data dir and config file by the one launch rule (see the module doc).
pub fn resolve(
    config: Option<&Path>,
    listen: Option<SocketAddr>,
    data_dir: Option<&Path>,
) -> Result<Launch, ConfigError> {
    let file = config
        .map(Path::to_path_buf)
        .or_else(|| crate::paths::default_config_file().filter(|p| p.exists()));
    let mut settings = match &file {
        Some(f) => load_file(f)?,
        None => Settings::default(),
    };
    if let Some(l) = listen {
        settings.listen = l;
    }
    if !settings.listen.ip().is_loopback() {
        return Err(ConfigError::NotLoopback(settings.listen));
    }
    let data_dir = data_dir
        .map(Path::to_path_buf)
        .or_else(|| settings.data_dir.clone())
        .or_else(crate::paths::default_data_dir)
        .ok_or(ConfigError::NoDataDir)?;
    let config_file = config
        .map(Path::to_path_buf)
        .or_else(crate::paths::default_config_file);
    Ok(Launch {
        settings,
        data_dir,
        config_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(v: &[&str]) -> Result<LaunchArgs, clap::Error> {
        LaunchArgs::parse_from_args(v.iter().copied())
    }

    #[test]
    fn tray_arguments_parse_like_the_hand_written_parser() {
        assert_eq!(parse(&[]).unwrap(), LaunchArgs::default());
        let a = parse(&[
            "--config",
            "/c.toml",
            "--listen=127.0.0.1:1",
            "-psn_0_12345",
            "--data-dir=/d",
        ])
        .unwrap();
        assert_eq!(a.config.as_deref(), Some(Path::new("/c.toml")));
        assert_eq!(a.listen, Some("127.0.0.1:1".parse().unwrap()));
        assert_eq!(a.data_dir.as_deref(), Some(Path::new("/d")));
        assert_eq!(
            parse(&["--bogus"]).unwrap_err().kind(),
            ErrorKind::UnknownArgument
        );
        assert_eq!(
            parse(&["stray"]).unwrap_err().kind(),
            ErrorKind::UnknownArgument
        );
        assert_eq!(
            parse(&["--config"]).unwrap_err().kind(),
            ErrorKind::InvalidValue
        );
        assert_eq!(
            parse(&["--listen", "nope"]).unwrap_err().kind(),
            ErrorKind::ValueValidation
        );
        assert_eq!(
            parse(&["--help"]).unwrap_err().kind(),
            ErrorKind::DisplayHelp
        );
    }

    #[test]
    fn flags_override_the_file_and_missing_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "listen = \"127.0.0.1:1\"\ndata_dir = \"/from/file\"\n").unwrap();
        let l = resolve(Some(&f), Some("127.0.0.1:2".parse().unwrap()), None).unwrap();
        assert_eq!(l.settings.listen.port(), 2);
        assert_eq!(l.data_dir, PathBuf::from("/from/file"));
        assert_eq!(l.config_file.as_deref(), Some(f.as_path()));
        assert!(matches!(
            resolve(Some(Path::new("/nonexistent.toml")), None, None),
            Err(ConfigError::Read { .. })
        ));
        assert!(matches!(
            resolve(Some(&f), Some("0.0.0.0:9".parse().unwrap()), None),
            Err(ConfigError::NotLoopback(_))
        ));
    }
}
