//! What the dashboard process tells WebKitGTK so that it holds less memory (Linux only; the
//! other platforms' webviews are not touched).
//!
//! The dashboard is one local page on Weir's own loopback origin: it needs no back/forward
//! page cache, no big memory cache, no WebGL and no GPU compositing (it draws text, tables and
//! one small canvas chart). Each [`Tweak`] switches one of those off; BENCHMARKS.md ("Tray
//! memory") says what each one saved, measured one at a time with `scripts/bench-tray-rss.sh`.
//!
//! `WEIR_DASHBOARD_WEBKIT` picks the tweaks for a measurement: unset = [`DEFAULT`], `none` =
//! WebKit's (and wry's) own settings, or a comma-separated list of [`Tweak::name`]s.

/// The environment variable that overrides [`DEFAULT`] (for measurements).
pub const ENV: &str = "WEIR_DASHBOARD_WEBKIT";

/// One setting the dashboard changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tweak {
    /// `WebContext` cache model `DocumentViewer`: WebKit's smallest memory caches (wry leaves
    /// the `WebBrowser` model, sized for browsing many sites).
    CacheModel,
    /// `Settings` hardware acceleration policy `Never`: the page is drawn on the CPU, so the
    /// web process loads no GL driver (Mesa's llvmpipe on a machine without a GPU).
    NoAcceleration,
    /// `Settings` page cache off (wry turns it on): pages left are not kept alive.
    NoPageCache,
    /// `Settings` WebGL and WebAudio off (wry turns both on; the page uses neither).
    NoWebgl,
    /// `GDK_GL=disable` for the dashboard process itself (unless the user set `GDK_GL`): with
    /// no accelerated compositing its GTK side draws with cairo and needs no GL either.
    NoGl,
    /// `JSC_useJIT=false` in the environment the web process inherits: JavaScriptCore runs the
    /// page in its interpreter, with no JIT code pools.
    NoJit,
    /// A memory limit for WebKit's network process (`MemoryPressureSettings`, 2.34+): above
    /// it the process drops its caches.
    NetworkPressure,
}

/// What the dashboard uses unless [`ENV`] says otherwise.
pub const DEFAULT: &[Tweak] = &[
    Tweak::CacheModel,
    Tweak::NoAcceleration,
    Tweak::NoPageCache,
    Tweak::NoWebgl,
    Tweak::NoGl,
];

const ALL: [Tweak; 7] = [
    Tweak::CacheModel,
    Tweak::NoAcceleration,
    Tweak::NoPageCache,
    Tweak::NoWebgl,
    Tweak::NoGl,
    Tweak::NoJit,
    Tweak::NetworkPressure,
];

/// The network process's limit for [`Tweak::NetworkPressure`], in MB.
pub const NETWORK_LIMIT_MB: u32 = 48;

impl Tweak {
    /// The tweak's name in [`ENV`].
    pub fn name(self) -> &'static str {
        match self {
            Tweak::CacheModel => "cache-model",
            Tweak::NoAcceleration => "no-acceleration",
            Tweak::NoPageCache => "no-page-cache",
            Tweak::NoWebgl => "no-webgl",
            Tweak::NoGl => "no-gl",
            Tweak::NoJit => "no-jit",
            Tweak::NetworkPressure => "network-pressure",
        }
    }
}

/// The tweaks [`ENV`]'s value asks for (`None`: unset). An unknown name is an error naming
/// the known ones.
pub fn parse(value: Option<&str>) -> Result<Vec<Tweak>, String> {
    let Some(value) = value.map(str::trim) else {
        return Ok(DEFAULT.to_vec());
    };
    if value == "none" || value.is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(str::trim)
        .map(|name| {
            ALL.into_iter().find(|t| t.name() == name).ok_or_else(|| {
                let known: Vec<_> = ALL.iter().map(|t| t.name()).collect();
                format!(
                    "{ENV}: unknown setting {name:?}; use `none` or a comma-separated list of {}",
                    known.join(", ")
                )
            })
        })
        .collect()
}

/// The tweaks for this process, from [`ENV`]; a bad value is logged and [`DEFAULT`] used.
pub fn chosen() -> Vec<Tweak> {
    let value = std::env::var(ENV).ok();
    parse(value.as_deref()).unwrap_or_else(|e| {
        tracing::warn!("weir-tray dashboard: {e}");
        DEFAULT.to_vec()
    })
}

/// The environment tweaks; call first thing in the dashboard process, before GTK or any other
/// thread starts (the web process inherits this process's environment).
pub fn apply_env(tweaks: &[Tweak]) {
    #[cfg(target_os = "linux")]
    {
        if tweaks.contains(&Tweak::NoGl) && std::env::var_os("GDK_GL").is_none() {
            std::env::set_var("GDK_GL", "disable");
        }
        if tweaks.contains(&Tweak::NoJit) && std::env::var_os("JSC_useJIT").is_none() {
            std::env::set_var("JSC_useJIT", "false");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = tweaks;
}

/// The process-wide WebKit tweaks; call on the main thread after GTK is up and before the
/// first webview (the network process reads its memory settings when it starts).
#[cfg(target_os = "linux")]
pub fn apply_process(tweaks: &[Tweak]) {
    if tweaks.contains(&Tweak::NetworkPressure) {
        let mut settings = webkit2gtk::MemoryPressureSettings::new();
        settings.set_memory_limit(NETWORK_LIMIT_MB);
        webkit2gtk::WebsiteDataManager::set_memory_pressure_settings(&mut settings);
    }
}

/// The per-webview tweaks, then `url` loaded: the settings apply before the page's first load.
#[cfg(target_os = "linux")]
pub fn apply_to_webview(webview: &webkit2gtk::WebView, tweaks: &[Tweak], url: &str) {
    use webkit2gtk::{CacheModel, HardwareAccelerationPolicy};
    use webkit2gtk::{SettingsExt, WebContextExt, WebViewExt};
    if tweaks.contains(&Tweak::CacheModel) {
        if let Some(context) = webview.context() {
            context.set_cache_model(CacheModel::DocumentViewer);
        }
    }
    if let Some(settings) = WebViewExt::settings(webview) {
        if tweaks.contains(&Tweak::NoAcceleration) {
            settings.set_hardware_acceleration_policy(HardwareAccelerationPolicy::Never);
        }
        if tweaks.contains(&Tweak::NoPageCache) {
            settings.set_enable_page_cache(false);
        }
        if tweaks.contains(&Tweak::NoWebgl) {
            settings.set_enable_webgl(false);
            settings.set_enable_webaudio(false);
        }
    }
    webview.load_uri(url);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_knob_picks_tweaks_by_name_and_refuses_unknown_ones() {
        assert_eq!(parse(None).unwrap(), DEFAULT);
        assert_eq!(parse(Some("none")).unwrap(), []);
        assert_eq!(
            parse(Some("no-jit, cache-model")).unwrap(),
            [Tweak::NoJit, Tweak::CacheModel]
        );
        for t in ALL {
            assert_eq!(parse(Some(t.name())).unwrap(), [t]);
        }
        let e = parse(Some("cache-model,turbo")).unwrap_err();
        assert!(
            e.contains("\"turbo\"") && e.contains("no-acceleration"),
            "{e}"
        );
    }
}
