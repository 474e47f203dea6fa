//! Seeded synthetic classification sets, for quick sweeps and tests.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::Dataset;
use crate::TrialsError;

/// One standard normal draw (Box-Muller; the second value is dropped to keep streams simple).
fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]: ln never sees 0
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// What every generator needs of its settings; [`check_glyphs`] adds the glyphs' own.
pub(super) fn check(samples: usize, classes: usize, noise: f64) -> Result<(), TrialsError> {
    let key = |key, message| Err(TrialsError::Key { key, message });
    if samples < 10 {
        return key(
            "samples",
            format!("a synthetic dataset needs samples >= 10, found {samples}"),
        );
    }
    if classes < 2 {
        return key(
            "classes",
            format!("a synthetic dataset needs classes >= 2, found {classes}"),
        );
    }
    if !(noise >= 0.0 && noise.is_finite()) {
        return key(
            "noise",
            format!("a synthetic dataset needs noise >= 0, found {noise}"),
        );
    }
    Ok(())
}

/// [`check`], and at most one class per shape of [`GLYPH_SHAPES`].
pub(super) fn check_glyphs(samples: usize, classes: usize, noise: f64) -> Result<(), TrialsError> {
    check(samples, classes, noise)?;
    if classes > GLYPH_SHAPES.len() {
        return Err(TrialsError::Key {
            key: "classes",
            message: format!(
                "glyphs draws 2 to {} shapes, found {classes}",
                GLYPH_SHAPES.len()
            ),
        });
    }
    Ok(())
}

/// `classes` interleaved 2-D spiral arms with Gaussian noise: not linearly separable.
///
/// ```
/// let d = tune_trials::spirals(300, 3, 0.1, 0).unwrap();
/// assert_eq!((d.len(), d.features, d.classes), (300, 2, 3));
/// ```
pub fn spirals(
    samples: usize,
    classes: usize,
    noise: f64,
    seed: u64,
) -> Result<Dataset, TrialsError> {
    check(samples, classes, noise)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut x, mut y) = (Vec::with_capacity(2 * samples), Vec::with_capacity(samples));
    for i in 0..samples {
        let class = i % classes;
        let r: f64 = rng.random();
        let theta = class as f64 * std::f64::consts::TAU / classes as f64 + 4.0 * r;
        x.push((r * theta.sin() + noise * standard_normal(&mut rng)) as f32);
        x.push((r * theta.cos() + noise * standard_normal(&mut rng)) as f32);
        y.push(class as u32);
    }
    Ok(Dataset {
        name: "spirals".into(),
        x,
        y,
        features: 2,
        classes,
        image: None,
    })
}

/// Isotropic Gaussian blobs in 8 dimensions around seeded centres in [-1, 1]^8.
///
/// ```
/// let d = tune_trials::blobs(200, 4, 0.5, 1).unwrap();
/// assert_eq!((d.len(), d.features, d.classes), (200, 8, 4));
/// ```
pub fn blobs(
    samples: usize,
    classes: usize,
    noise: f64,
    seed: u64,
) -> Result<Dataset, TrialsError> {
    const DIM: usize = 8;
    check(samples, classes, noise)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centres: Vec<f64> = (0..classes * DIM)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let (mut x, mut y) = (
        Vec::with_capacity(DIM * samples),
        Vec::with_capacity(samples),
    );
    for i in 0..samples {
        let class = i % classes;
        for c in &centres[class * DIM..(class + 1) * DIM] {
            x.push((c + noise * standard_normal(&mut rng)) as f32);
        }
        y.push(class as u32);
    }
    Ok(Dataset {
        name: "blobs".into(),
        x,
        y,
        features: DIM,
        classes,
        image: None,
    })
}

/// Side of a [`glyphs`] image, in pixels.
pub const GLYPH_SIDE: usize = 32;

/// The shapes [`glyphs`] draws, one per class, in class order.
pub const GLYPH_SHAPES: [&str; 10] = [
    "disc", "ring", "square", "frame", "triangle", "cross", "plus", "bars", "bar", "diagonal",
];

/// `samples` grey 32x32 images of `classes` (2 to 10) shapes from [`GLYPH_SHAPES`], each one
/// drawn with a seeded position, size, rotation, stroke and ink, anti-aliased, under Gaussian
/// pixel noise of standard deviation `noise`: an image classification set the size of MNIST's
/// images, made in the binary. The MLP sees 1,024 features, the CNN one 32x32 channel.
///
/// ```
/// let d = tune_trials::glyphs(50, 10, 0.1, 0).unwrap();
/// assert_eq!((d.len(), d.features, d.classes), (50, 1024, 10));
/// assert_eq!(d.image, Some((1, 32, 32)));
/// ```
pub fn glyphs(
    samples: usize,
    classes: usize,
    noise: f64,
    seed: u64,
) -> Result<Dataset, TrialsError> {
    check_glyphs(samples, classes, noise)?;
    let side = GLYPH_SIDE;
    let mut x = vec![0.0f32; side * side * samples];
    let y: Vec<u32> = (0..samples).map(|i| (i % classes) as u32).collect();
    // Image `i` is drawn from where the seed's one stream stands after the images before it
    // (each takes GLYPH_WORDS of it), so the images are drawn in parallel and the set is the
    // one a single pass over the stream draws.
    x.par_chunks_mut(side * side)
        .zip(&y)
        .enumerate()
        .for_each(|(i, (image, &class))| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_word_pos(i as u128 * GLYPH_WORDS);
            draw_glyph(&mut rng, class as usize, noise, image);
        });
    Ok(Dataset {
        name: "glyphs".into(),
        x,
        y,
        features: side * side,
        classes,
        image: Some((1, side, side)),
    })
}

/// 32-bit words of the stream one [`glyphs`] image takes: six uniform draws for its
/// placement and ink, then two per pixel for its noise, each draw a `u64`.
const GLYPH_WORDS: u128 = 2 * (6 + 2 * (GLYPH_SIDE * GLYPH_SIDE) as u128);

/// Draws one [`glyphs`] image of `class` into `image` (`GLYPH_SIDE`^2 pixels), taking exactly
/// [`GLYPH_WORDS`] of `rng`'s stream.
fn draw_glyph(rng: &mut ChaCha8Rng, class: usize, noise: f64, image: &mut [f32]) {
    let side = GLYPH_SIDE;
    let mid = side as f64 / 2.0;
    let (cx, cy) = (
        mid + rng.random_range(-5.0..5.0),
        mid + rng.random_range(-5.0..5.0),
    );
    let scale = rng.random_range(7.0..11.0);
    let (sin, cos) = rng.random_range(-0.35f64..0.35).sin_cos();
    let stroke = rng.random_range(0.12..0.22);
    let ink = rng.random_range(0.6..1.0);
    for (p, pixel) in image.iter_mut().enumerate() {
        let (px, py) = (p % side, p / side);
        let (dx, dy) = (
            (px as f64 + 0.5 - cx) / scale,
            (py as f64 + 0.5 - cy) / scale,
        );
        let (u, v) = (dx * cos + dy * sin, dy * cos - dx * sin);
        // Signed distance in pixels, so edges blur over one pixel at every size.
        let cover = (0.5 - glyph_distance(class, u, v, stroke) * scale).clamp(0.0, 1.0);
        *pixel = (ink * cover + noise * standard_normal(rng)) as f32;
    }
}

/// Signed distance from `(u, v)` (the glyph's own coordinates, its box about [-1, 1]^2, v
/// down) to shape `class`, negative inside; strokes are `stroke` wide on each side.
fn glyph_distance(class: usize, u: f64, v: f64, stroke: f64) -> f64 {
    let radius = u.hypot(v);
    let boxed = u.abs().max(v.abs());
    let within = boxed - 0.9;
    let diagonal = |a: f64| a.abs() / std::f64::consts::SQRT_2;
    match class {
        0 => radius - 0.8,
        1 => (radius - 0.7).abs() - stroke,
        2 => boxed - 0.7,
        3 => (boxed - 0.7).abs() - stroke,
        // Apex (0, -0.8), base corners (+-0.8, 0.6): the largest distance to its 3 edges.
        4 => (v - 0.6).max((u.abs() * 1.4 - (v + 0.8) * 0.8) / 1.4f64.hypot(0.8)),
        5 => (diagonal(u - v).min(diagonal(u + v)) - stroke).max(within),
        6 => (u.abs().min(v.abs()) - stroke).max(within),
        7 => ((v.abs() - 0.45).abs() - stroke).max(u.abs() - 0.85),
        8 => (u.abs() - stroke).max(v.abs() - 0.9),
        _ => (diagonal(u - v) - stroke).max(within),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_are_seeded_and_balanced() {
        assert_eq!(
            spirals(90, 3, 0.1, 4).unwrap(),
            spirals(90, 3, 0.1, 4).unwrap()
        );
        assert_ne!(
            spirals(90, 3, 0.1, 4).unwrap().x,
            spirals(90, 3, 0.1, 5).unwrap().x
        );
        let b = blobs(100, 4, 0.0, 2).unwrap();
        assert!((0..4).all(|c| b.y.iter().filter(|&&y| y == c).count() == 25));
        // Without noise, every sample of a class sits on its centre.
        assert_eq!(b.x[..8], b.x[4 * 8..5 * 8]);
        assert!(spirals(5, 3, 0.1, 0).is_err() && blobs(100, 1, 0.1, 0).is_err());
    }

    /// Images drawn in parallel from their places in the stream are those one pass draws
    /// (the glyphs numbers of docs/design/fused-trials.md were measured on the latter).
    #[test]
    fn glyphs_drawn_in_parallel_are_the_ones_drawn_in_one_pass() {
        let (samples, classes, noise, seed) = (40, 10, 0.3, 1);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut one_pass = vec![0.0f32; samples * GLYPH_SIDE * GLYPH_SIDE];
        for (i, image) in one_pass.chunks_mut(GLYPH_SIDE * GLYPH_SIDE).enumerate() {
            draw_glyph(&mut rng, i % classes, noise, image);
        }
        assert_eq!(rng.get_word_pos(), samples as u128 * GLYPH_WORDS);
        assert_eq!(glyphs(samples, classes, noise, seed).unwrap().x, one_pass);
    }

    #[test]
    fn glyphs_are_seeded_balanced_and_drawn_apart() {
        let g = glyphs(200, 10, 0.0, 3).unwrap();
        assert_eq!(g, glyphs(200, 10, 0.0, 3).unwrap());
        assert_ne!(g.x, glyphs(200, 10, 0.0, 4).unwrap().x);
        assert!((0..10).all(|c| g.y.iter().filter(|&&y| y == c).count() == 20));
        // Without noise every pixel is ink coverage in [0, 1], and every glyph has ink.
        assert!(g.x.iter().all(|&p| (0.0..=1.0).contains(&p)));
        let ink: Vec<f32> = g.x.chunks(1024).map(|img| img.iter().sum()).collect();
        assert!(ink.iter().all(|&s| s > 10.0), "{ink:?}");
        // Hand-checked points: the centre is inside the disc and the square, outside the ring
        // and the frame; a far corner is outside the disc.
        assert_eq!(glyph_distance(0, 0.0, 0.0, 0.2), -0.8);
        assert_eq!(glyph_distance(2, 0.0, 0.0, 0.2), -0.7);
        assert!((glyph_distance(1, 0.0, 0.0, 0.2) - 0.5).abs() < 1e-12);
        assert!((glyph_distance(3, 0.0, 0.0, 0.2) - 0.5).abs() < 1e-12);
        assert!(glyph_distance(4, 0.0, 0.0, 0.2) < 0.0 && glyph_distance(4, 0.0, -0.9, 0.2) > 0.0);
        assert!(glyph_distance(0, 1.0, 1.0, 0.2) > 0.5);
        assert!(glyph_distance(6, 0.0, 0.5, 0.2) < 0.0 && glyph_distance(6, 0.5, 0.5, 0.2) > 0.0);
        assert!(glyphs(100, 11, 0.1, 0).is_err());
    }
}
