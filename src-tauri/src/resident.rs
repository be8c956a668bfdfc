//! Hands back the pages of the WebKit libraries that the tray process maps but never runs.
//!
//! The binary links WebKitGTK because Tauri does, so the dynamic loader maps libwebkit2gtk,
//! JavaScriptCore and the flite speech-synthesis voices WebKit links into the tray process as
//! well, and touches them once while loading (relocation tables, constructors): ~20 MB of
//! resident pages that nothing in this process uses again, because WebKit only ever runs in
//! the dashboard's own process ([`crate::dashboard`]). Once the tray is up,
//! [`release_webkit_pages`] asks the kernel to reclaim them (`MADV_PAGEOUT`, Linux 5.4+):
//! clean file pages are dropped (and read back from the file if they are ever touched again),
//! pages another process maps too are left alone, and pages the loader wrote (relocated data)
//! stay resident unless the machine has swap. Nothing about the mappings changes but where
//! their pages are.

/// File-name prefixes of the libraries the tray process never runs.
pub const WEBKIT_LIBRARIES: &[&str] = &["libwebkit2gtk-", "libjavascriptcoregtk-", "libflite"];

/// What [`release_webkit_pages`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Read-only mappings of [`WEBKIT_LIBRARIES`] advised.
    pub mappings: usize,
    /// Mappings the kernel refused (an old kernel without `MADV_PAGEOUT`, a mapping gone).
    pub failed: usize,
    /// The resident size (`Rss`) of all their mappings before and after, in KiB.
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
}

/// One line of `/proc/self/maps`: `start-end perms offset dev inode [path]`.
#[derive(Debug, PartialEq, Eq)]
struct Mapping<'a> {
    start: usize,
    end: usize,
    writable: bool,
    path: &'a str,
}

impl<'a> Mapping<'a> {
    fn parse(line: &'a str) -> Option<Mapping<'a>> {
        let mut fields = line.splitn(6, ' ');
        let (start, end) = fields.next()?.split_once('-')?;
        let perms = fields.next()?;
        let path = fields.nth(3).unwrap_or("").trim_start();
        Some(Mapping {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            writable: perms.as_bytes().get(1) == Some(&b'w'),
            path,
        })
    }

    fn is_one_of(&self, libraries: &[&str]) -> bool {
        let name = self.path.rsplit('/').next().unwrap_or("");
        libraries.iter().any(|prefix| name.starts_with(prefix))
    }
}

/// Summed `Rss` (KiB) of this process's mappings of `libraries`, from `/proc/self/smaps`.
pub fn resident_kib(libraries: &[&str]) -> std::io::Result<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut counting = false;
    let mut kib = 0;
    for line in smaps.lines() {
        if let Some(rss) = line.strip_prefix("Rss:") {
            if counting {
                kib += rss
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        } else if let Some(m) = Mapping::parse(line).filter(|m| m.end > m.start) {
            counting = m.is_one_of(libraries);
        }
    }
    Ok(kib)
}

/// Asks the kernel to reclaim the resident pages of the read-only mappings of
/// [`WEBKIT_LIBRARIES`] in this process. Only for a process that never runs WebKit.
pub fn release_webkit_pages() -> std::io::Result<Released> {
    release_pages(WEBKIT_LIBRARIES)
}

/// Asks the kernel to reclaim the resident pages of this process's read-only mappings of the
/// files whose names start with one of `files`.
#[cfg(target_os = "linux")]
pub fn release_pages(files: &[&str]) -> std::io::Result<Released> {
    let rss_before_kib = resident_kib(files)?;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let (mut mappings, mut failed) = (0, 0);
    for m in maps.lines().filter_map(Mapping::parse) {
        if m.writable || m.end <= m.start || !m.is_one_of(files) {
            continue;
        }
        // SAFETY: advice only: MADV_PAGEOUT never changes what a mapping holds (a reclaimed
        // page is read back from its file, or from swap, on its next touch), and the range is
        // one whole mapping of this process as /proc/self/maps lists it (if it has gone since,
        // the call fails with ENOMEM and nothing happens).
        let rc = unsafe {
            libc::madvise(
                m.start as *mut libc::c_void,
                m.end - m.start,
                libc::MADV_PAGEOUT,
            )
        };
        if rc == 0 {
            mappings += 1;
        } else {
            failed += 1;
        }
    }
    Ok(Released {
        mappings,
        failed,
        rss_before_kib,
        rss_after_kib: resident_kib(files)?,
    })
}

/// Nothing to do outside Linux: the tray links no WebKit there that it does not run.
#[cfg(not(target_os = "linux"))]
pub fn release_pages(_files: &[&str]) -> std::io::Result<Released> {
    Ok(Released::default())
}

/// [`release_webkit_pages`] for the running tray, logged.
pub fn after_start() {
    match release_webkit_pages() {
        Ok(r) if r.mappings > 0 => tracing::info!(
            "weir-tray: WebKit pages resident in the tray process: {} -> {} KiB ({} mappings)",
            r.rss_before_kib,
            r.rss_after_kib,
            r.mappings
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("weir-tray: cannot hand back WebKit's pages: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let m = Mapping::parse(
            "7f2a1c000000-7f2a1c400000 r-xp 00200000 fe:01 1234     \
             /usr/lib/x86_64-linux-gnu/libwebkit2gtk-4.1.so.0.19.9",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.writable),
            (0x7f2a1c000000, 0x7f2a1c400000, false)
        );
        assert!(m.is_one_of(WEBKIT_LIBRARIES));
        let m = Mapping::parse(
            "7f2a1d000000-7f2a1d001000 rw-p 00000000 fe:01 99 /usr/lib/libflite_cmu_us_kal.so.1",
        )
        .unwrap();
        assert!(m.writable && m.is_one_of(WEBKIT_LIBRARIES));
        let m = Mapping::parse("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(m.path, "");
        assert!(!m.is_one_of(WEBKIT_LIBRARIES));
        let m = Mapping::parse("55aa0000-55ab0000 r--p 00000000 fe:01 7 /usr/lib/libgtk-3.so.0")
            .unwrap();
        assert!(!m.is_one_of(WEBKIT_LIBRARIES));
        assert_eq!(Mapping::parse("Rss:                 4 kB"), None);
    }

    /// The test binary does not link WebKit (nothing in the library's tests reaches wry), so
    /// this gives back the pages of its own executable, mapped by this process alone: clean
    /// file pages, as WebKit's are in the tray.
    #[cfg(target_os = "linux")]
    #[test]
    fn resident_pages_are_given_back() {
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_str().unwrap().to_owned();
        let r = release_pages(&[&name]).unwrap();
        assert!(r.mappings > 0, "{r:?}");
        assert_eq!(r.failed, 0, "{r:?}");
        assert!(r.rss_after_kib < r.rss_before_kib, "{r:?}");
        let none = release_pages(&["no-such-library-"]).unwrap();
        assert_eq!((none.mappings, none.rss_before_kib), (0, 0));
    }
}
