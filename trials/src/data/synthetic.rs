//! Seeded synthetic classification sets, for quick sweeps and tests.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::Dataset;
use crate::TrialsError;

/// One standard normal draw (Box-Muller; the second value is dropped to keep streams simple).
fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]: ln never sees 0
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn check(samples: usize, classes: usize, noise: f64) -> Result<(), TrialsError> {
    if samples < 10 || classes < 2 || !(noise >= 0.0 && noise.is_finite()) {
        return Err(TrialsError::Config(format!(
            "a synthetic dataset needs samples >= 10, classes >= 2 and noise >= 0; found samples = {samples}, classes = {classes}, noise = {noise}"
        )));
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
}
