//! Tray icons, one per [`Overall`] state, embedded at compile time. They differ in shape as well
//! as colour (filled circle, triangle, square with a bar, hollow ring, pause bars) so monochrome
//! panels and colour-blind users can tell them apart. Drawn by `icons/generate.py`.

use crate::tray_state::Overall;
use tauri::image::Image;

/// The PNG bytes for a state.
pub fn png(state: Overall) -> &'static [u8] {
    match state {
        Overall::Healthy => include_bytes!("../icons/tray/healthy.png"),
        Overall::Degraded => include_bytes!("../icons/tray/degraded.png"),
        Overall::BreakerOpen => include_bytes!("../icons/tray/open.png"),
        Overall::Unknown => include_bytes!("../icons/tray/unknown.png"),
        Overall::Paused => include_bytes!("../icons/tray/paused.png"),
    }
}

/// The decoded icon for a state.
pub fn image(state: Overall) -> tauri::Result<Image<'static>> {
    Image::from_bytes(png(state))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Overall; 5] = [
        Overall::Healthy,
        Overall::Degraded,
        Overall::BreakerOpen,
        Overall::Unknown,
        Overall::Paused,
    ];

    /// Which pixels are (mostly) opaque: the shape, ignoring colour.
    fn silhouette(state: Overall) -> Vec<bool> {
        let img = image(state).unwrap();
        img.rgba().chunks(4).map(|px| px[3] >= 128).collect()
    }

    #[test]
    fn every_state_decodes_as_square_rgba() {
        for s in ALL {
            let img = image(s).unwrap();
            assert_eq!((img.width(), img.height()), (64, 64), "{s:?}");
            assert_eq!(img.rgba().len(), 64 * 64 * 4, "{s:?}");
            assert!(
                img.rgba().chunks(4).any(|px| px[3] == 0),
                "{s:?} needs a transparent background"
            );
        }
    }

    #[test]
    fn shapes_differ_pairwise_not_only_colours() {
        let shapes: Vec<(Overall, Vec<bool>)> = ALL.iter().map(|s| (*s, silhouette(*s))).collect();
        for (i, (a, sa)) in shapes.iter().enumerate() {
            for (b, sb) in &shapes[i + 1..] {
                let differing = sa.iter().zip(sb).filter(|(x, y)| x != y).count();
                // At least 5% of the pixels: a clearly different outline, not anti-aliasing noise.
                assert!(
                    differing > 64 * 64 / 20,
                    "{a:?} and {b:?} differ in only {differing} pixels"
                );
            }
        }
    }
}
