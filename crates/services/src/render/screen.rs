//! The screen of the render services: a framebuffer of 0xAARRGGBB pixels,
//! the windows placed on it, the compositing of a client's RGB frame into
//! its window, and PNG snapshots a person can look at.
//!
//! It owns pixels and geometry only: it never decides who composites when
//! (the compositor, the service's rendering tasks and the baseline server
//! do), and compositing never allocates (a window's scaling tables are made
//! once, when the window is placed).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes per pixel of a submitted frame (packed RGB, 8 bits per channel).
pub const BYTES_PER_PIXEL: usize = 3;
/// Largest frame or screen side accepted: what a scenario's screen may
/// ask for.
pub use tessera_policy::media::MAX_SIDE;

/// A rectangle of the screen, in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Rect {
    pub x: usize,
    pub y: usize,
    pub width: usize,
    pub height: usize,
}

impl Rect {
    pub fn new(x: usize, y: usize, width: usize, height: usize) -> Rect {
        Rect {
            x,
            y,
            width,
            height,
        }
    }

    /// The `index`-th tile of a `screen_width` × `screen_height` screen for
    /// windows of `width` × `height`: left to right, then top to bottom,
    /// overlapping once the screen is full.
    pub fn tile(index: usize, width: usize, height: usize, screen: (usize, usize)) -> Rect {
        let columns = (screen.0 / width.max(1)).max(1);
        Rect::new(
            (index % columns) * width,
            ((index / columns) * height).min(screen.1.saturating_sub(height)),
            width,
            height,
        )
    }
}

/// The screen framebuffer: 0xAARRGGBB pixels, row after row. Service
/// threads blend into disjoint or overlapping windows at once, so pixels are
/// relaxed atomics (plain loads and stores on the machine).
pub struct Screen {
    width: usize,
    height: usize,
    pixels: Box<[AtomicU32]>,
}

impl Screen {
    /// A black screen.
    pub fn new(width: usize, height: usize) -> Screen {
        Screen {
            width,
            height,
            pixels: (0..width * height).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn height(&self) -> usize {
        self.height
    }

    /// The pixel at (x, y) as 0xAARRGGBB.
    pub fn pixel(&self, x: usize, y: usize) -> u32 {
        self.pixels[y * self.width + x].load(Ordering::Relaxed)
    }
}

/// A window's geometry on the screen: its rectangle (clipped to the screen)
/// and, per window row and column, the frame row and byte offset it shows
/// (nearest-neighbour scaling, computed once).
pub(crate) struct Geometry {
    pub(crate) rect: Rect,
    source_rows: Box<[u32]>,
    source_columns: Box<[u32]>,
    frame_width: usize,
}

impl Geometry {
    pub(crate) fn new(
        frame_width: usize,
        frame_height: usize,
        rect: Rect,
        screen: &Screen,
    ) -> Geometry {
        let x = rect.x.min(screen.width);
        let y = rect.y.min(screen.height);
        let clipped = Rect {
            x,
            y,
            width: rect.width.min(screen.width - x),
            height: rect.height.min(screen.height - y),
        };
        // Source index of window position i along a side: i × frame / window.
        let map = |n: usize, frame: usize, window: usize, unit: usize| -> Box<[u32]> {
            (0..n)
                .map(|i| ((i * frame / window.max(1)).min(frame - 1) * unit) as u32)
                .collect()
        };
        Geometry {
            rect: clipped,
            source_rows: map(clipped.height, frame_height, rect.height, 1),
            source_columns: map(clipped.width, frame_width, rect.width, BYTES_PER_PIXEL),
            frame_width,
        }
    }
}

/// Blends an RGB `frame` into its window of `screen`: each window pixel
/// takes the nearest frame pixel, mixed with the pixel beneath at
/// `opacity`/256.
pub(crate) fn composite(frame: &[u8], geometry: &Geometry, screen: &Screen, opacity: u16) {
    let a = u32::from(opacity.min(256));
    let blend = |s: u8, d: u32| (u32::from(s) * a + (d & 0xff) * (256 - a)) >> 8;
    let Rect { x, y, width, .. } = geometry.rect;
    let stride = geometry.frame_width * BYTES_PER_PIXEL;
    for (row, &source_row) in geometry.source_rows.iter().enumerate() {
        let start = source_row as usize * stride;
        let source = &frame[start..start + stride];
        let first = (y + row) * screen.width + x;
        let target = &screen.pixels[first..first + width];
        for (pixel, &column) in target.iter().zip(geometry.source_columns.iter()) {
            let c = column as usize;
            let beneath = pixel.load(Ordering::Relaxed);
            let r = blend(source[c], beneath >> 16);
            let g = blend(source[c + 1], beneath >> 8);
            let b = blend(source[c + 2], beneath);
            pixel.store(0xff00_0000 | r << 16 | g << 8 | b, Ordering::Relaxed);
        }
    }
}

impl Screen {
    /// The screen as packed RGB rows (alpha dropped).
    pub fn rgb(&self) -> Vec<u8> {
        self.pixels
            .iter()
            .flat_map(|p| {
                let v = p.load(Ordering::Relaxed);
                [(v >> 16) as u8, (v >> 8) as u8, v as u8]
            })
            .collect()
    }

    /// Writes the screen as an RGB PNG file.
    pub fn write_png(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.png()?)
    }

    /// The screen as an RGB PNG.
    pub fn png(&self) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        let mut encoder = png::Encoder::new(&mut bytes, self.width as u32, self.height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(io::Error::other)?;
        writer
            .write_image_data(&self.rgb())
            .map_err(io::Error::other)?;
        writer.finish().map_err(io::Error::other)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compositing_scales_and_blends() {
        let screen = Screen::new(20, 10);
        let geometry = Geometry::new(4, 2, Rect::new(2, 1, 8, 4), &screen);
        // Left half of the frame white, right half black.
        let mut frame = vec![0u8; 4 * 2 * 3];
        for row in frame.chunks_exact_mut(12) {
            row[..6].fill(255);
        }
        composite(&frame, &geometry, &screen, 256);
        assert_eq!(screen.pixel(2, 1), 0xffff_ffff, "top left: white");
        assert_eq!(screen.pixel(5, 4), 0xffff_ffff, "scaled ×2: still white");
        assert_eq!(screen.pixel(6, 1), 0xff00_0000, "right half: black");
        assert_eq!(screen.pixel(1, 1), 0, "outside the window: untouched");
        assert_eq!(screen.pixel(10, 1), 0, "outside the window: untouched");
        // Half-opaque white over that black: mid grey.
        let white = vec![255u8; 4 * 2 * 3];
        composite(&white, &geometry, &screen, 128);
        assert_eq!(screen.pixel(6, 1) & 0xff, 127);
    }

    #[test]
    fn windows_are_clipped_to_the_screen() {
        let screen = Screen::new(10, 10);
        let geometry = Geometry::new(4, 4, Rect::new(6, 8, 8, 8), &screen);
        assert_eq!((geometry.rect.width, geometry.rect.height), (4, 2));
        composite(&[200; 4 * 4 * 3], &geometry, &screen, 256);
        assert_eq!(screen.pixel(9, 9), 0xffc8_c8c8);
    }

    #[test]
    fn a_snapshot_is_a_png_of_the_screen() {
        let screen = Screen::new(3, 2);
        let geometry = Geometry::new(1, 1, Rect::new(1, 0, 1, 1), &screen);
        composite(&[10, 20, 30], &geometry, &screen, 256);
        let path = std::env::temp_dir().join(format!("tessera-screen-{}.png", std::process::id()));
        screen.write_png(&path).unwrap();
        let decoder = png::Decoder::new(std::fs::File::open(&path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut pixels).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!((info.width, info.height), (3, 2));
        assert_eq!(&pixels[..9], &[0, 0, 0, 10, 20, 30, 0, 0, 0]);
    }

    #[test]
    fn tiles_go_left_to_right_then_down_and_overlap_when_full() {
        let tile = |i| Rect::tile(i, 528, 432, (1280, 720));
        assert_eq!(tile(0), Rect::new(0, 0, 528, 432));
        assert_eq!(tile(1), Rect::new(528, 0, 528, 432));
        assert_eq!(tile(2), Rect::new(0, 720 - 432, 528, 432));
    }
}
