//! Datasets for the built-in trainables: the real ones shipped in `trials/data/`, seeded
//! synthetic generators, and a user's own CSV; all split and standardised the same way.

mod csv;
mod synthetic;

use std::path::PathBuf;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::TrialsError;

pub use csv::read_csv;
pub use synthetic::{blobs, glyphs, spirals, GLYPH_SHAPES, GLYPH_SIDE};

/// A labelled classification dataset, features row-major.
///
/// ```
/// let digits = tune_trials::Dataset::builtin("digits").unwrap();
/// assert_eq!((digits.len(), digits.features, digits.classes), (1797, 64, 10));
/// assert_eq!(digits.image, Some((1, 8, 8)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub name: String,
    /// `len() * features` values, one row per sample.
    pub x: Vec<f32>,
    /// Class index of each sample, below `classes`.
    pub y: Vec<u32>,
    pub features: usize,
    pub classes: usize,
    /// `(channels, height, width)` when the rows are images (what a CNN needs).
    pub image: Option<(usize, usize, usize)>,
}

/// Which data a built-in trainable trains on, as written in `[objective]`.
///
/// ```
/// use tune_trials::DataSpec;
/// let spec = DataSpec { dataset: Some("wine".into()), ..DataSpec::default() };
/// let split = spec.load(std::path::Path::new(".")).unwrap();
/// assert_eq!(split.train.len() + split.val.len(), 178);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataSpec {
    /// `digits`, `wine`, `breast_cancer`, `spirals`, `blobs` or `glyphs`.
    pub dataset: Option<String>,
    /// A CSV file of the user's own (header line, numeric features, one label column).
    pub csv: Option<PathBuf>,
    /// The CSV's label column; defaults to the last one.
    pub target: Option<String>,
    /// Share of the rows held out for validation.
    pub val_fraction: f64,
    /// Seed of the train/validation split: the same for every trial, so they compare.
    pub split_seed: u64,
    /// Rows drawn by a synthetic generator.
    pub samples: usize,
    /// Noise of a synthetic generator (standard deviation).
    pub noise: f64,
    /// Classes of a synthetic generator.
    pub classes: usize,
}

impl Default for DataSpec {
    fn default() -> Self {
        DataSpec {
            dataset: None,
            csv: None,
            target: None,
            val_fraction: 0.2,
            split_seed: 0,
            samples: 1000,
            noise: 0.2,
            classes: 3,
        }
    }
}

/// The names `dataset =` accepts.
pub const DATASETS: [&str; 6] = [
    "digits",
    "wine",
    "breast_cancer",
    "spirals",
    "blobs",
    "glyphs",
];

/// The keys of [`DataSpec`], as written in TOML.
pub const DATA_KEYS: [&str; 8] = [
    "dataset",
    "csv",
    "target",
    "val_fraction",
    "split_seed",
    "samples",
    "noise",
    "classes",
];

impl DataSpec {
    /// Checks every setting that can be judged without the rows themselves (a CSV file is
    /// judged when it is read): which data, the generator's settings, and a validation share
    /// that leaves rows on both sides of the split. An error names its key.
    ///
    /// ```
    /// use tune_trials::{DataSpec, TrialsError};
    /// let spec = DataSpec { dataset: Some("glyphs".into()), classes: 12, ..DataSpec::default() };
    /// assert!(matches!(spec.check(), Err(TrialsError::Key { key: "classes", .. })));
    /// ```
    pub fn check(&self) -> Result<(), TrialsError> {
        let key = |key, message| Err(TrialsError::Key { key, message });
        if !(self.val_fraction > 0.0 && self.val_fraction < 1.0) {
            return key(
                "val_fraction",
                format!(
                    "expected a number between 0 and 1, found {}",
                    self.val_fraction
                ),
            );
        }
        let rows = match (&self.dataset, &self.csv) {
            (Some(_), Some(_)) => {
                return key("csv", "give either `dataset` or `csv`, not both".into())
            }
            (None, None) => {
                return key(
                    "dataset",
                    format!(
                        "a built-in trainable needs `dataset` (one of {}) or `csv = \"file.csv\"`",
                        DATASETS.join(", ")
                    ),
                )
            }
            (None, Some(_)) => return Ok(()),
            (Some(name), None) => match name.as_str() {
                "spirals" | "blobs" => {
                    synthetic::check(self.samples, self.classes, self.noise)?;
                    self.samples
                }
                "glyphs" => {
                    synthetic::check_glyphs(self.samples, self.classes, self.noise)?;
                    self.samples
                }
                // Shipped in the binary, and small: milliseconds to count.
                _ => Dataset::builtin(name)?.len(),
            },
        };
        held_out(rows, self.val_fraction)
            .map(drop)
            .map_err(|message| TrialsError::Key {
                key: "val_fraction",
                message,
            })
    }

    /// [`DataSpec::check`], and that the data suits `builtin`: the cnn trains on images (the
    /// digits, the glyphs), not on a CSV's or a generator's plain feature rows.
    ///
    /// ```
    /// use tune_trials::{Builtin, DataSpec};
    /// let wine = DataSpec { dataset: Some("wine".into()), ..DataSpec::default() };
    /// assert!(wine.check_for(Builtin::Mlp).is_ok() && wine.check_for(Builtin::Cnn).is_err());
    /// ```
    pub fn check_for(&self, builtin: crate::Builtin) -> Result<(), TrialsError> {
        self.check()?;
        let images =
            self.csv.is_none() && matches!(self.dataset.as_deref(), Some("digits" | "glyphs"));
        if builtin == crate::Builtin::Cnn && !images {
            return Err(TrialsError::Key {
                key: "builtin",
                message: format!(
                    "the cnn trains on images (dataset \"digits\" or \"glyphs\"); {} has plain feature rows (use \"mlp\")",
                    match (&self.csv, &self.dataset) {
                        (Some(csv), _) => format!("csv \"{}\"", csv.display()),
                        (None, dataset) => format!("dataset \"{}\"", dataset.as_deref().unwrap_or_default()),
                    }
                ),
            });
        }
        Ok(())
    }

    /// Loads the data (a relative `csv` path is taken from `base`), splits it and
    /// standardises both parts with the training part's statistics, after [`DataSpec::check`].
    pub fn load(&self, base: &std::path::Path) -> Result<Split, TrialsError> {
        self.check()?;
        let data = match (&self.csv, self.dataset.as_deref().unwrap_or_default()) {
            (Some(path), _) => read_csv(&base.join(path), self.target.as_deref())?,
            (None, "spirals") => spirals(self.samples, self.classes, self.noise, self.split_seed)?,
            (None, "blobs") => blobs(self.samples, self.classes, self.noise, self.split_seed)?,
            (None, "glyphs") => glyphs(self.samples, self.classes, self.noise, self.split_seed)?,
            (None, name) => Dataset::builtin(name)?,
        };
        data.split(self.val_fraction, self.split_seed)
    }
}

/// The rows of `rows` that `val_fraction` holds out for validation, or why that leaves one
/// side empty.
fn held_out(rows: usize, val_fraction: f64) -> Result<usize, String> {
    let n_val = ((rows as f64) * val_fraction).round() as usize;
    if n_val == 0 || n_val >= rows {
        return Err(format!(
            "{rows} rows are too few to hold out {val_fraction} for validation"
        ));
    }
    Ok(n_val)
}

impl Dataset {
    /// One of the datasets shipped in the binary: `digits`, `wine`, `breast_cancer`.
    pub fn builtin(name: &str) -> Result<Dataset, TrialsError> {
        let (text, image) = match name {
            "digits" => {
                let mut text = String::new();
                std::io::Read::read_to_string(
                    &mut flate2::read::GzDecoder::new(
                        &include_bytes!("../../data/digits.csv.gz")[..],
                    ),
                    &mut text,
                )
                .map_err(|e| TrialsError::Data(format!("digits.csv.gz: {e}")))?;
                (text, Some((1, 8, 8)))
            }
            "wine" => (include_str!("../../data/wine_data.csv").to_string(), None),
            "breast_cancer" => (
                include_str!("../../data/breast_cancer.csv").to_string(),
                None,
            ),
            other => {
                let hint = tune_search::did_you_mean_hint(other, DATASETS);
                return Err(TrialsError::Key {
                    key: "dataset",
                    message: format!(
                        "expected one of {}, found \"{other}\"{hint}",
                        DATASETS.join(", ")
                    ),
                });
            }
        };
        let mut data = csv::parse_sklearn(name, &text)?;
        data.image = image;
        Ok(data)
    }

    pub fn len(&self) -> usize {
        self.y.len()
    }

    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    /// A seeded shuffle split into training and validation parts, standardised with the
    /// training part's per-feature mean and standard deviation.
    pub fn split(&self, val_fraction: f64, seed: u64) -> Result<Split, TrialsError> {
        let n = self.len();
        let n_val = held_out(n, val_fraction)
            .map_err(|e| TrialsError::Data(format!("{}: {e}", self.name)))?;
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        let (val_rows, train_rows) = order.split_at(n_val);
        let mut train = self.rows(train_rows);
        let mut val = self.rows(val_rows);
        let f = self.features;
        let mut mean = vec![0f64; f];
        let mut var = vec![0f64; f];
        for row in train.x.chunks(f) {
            for (m, &v) in mean.iter_mut().zip(row) {
                *m += v as f64;
            }
        }
        mean.iter_mut().for_each(|m| *m /= train.len() as f64);
        for row in train.x.chunks(f) {
            for ((s, &v), m) in var.iter_mut().zip(row).zip(&mean) {
                *s += (v as f64 - m).powi(2);
            }
        }
        // A constant feature (a border pixel of the digits) keeps scale 1 rather than
        // dividing by zero.
        let scale: Vec<f64> = var
            .iter()
            .map(|s| (s / train.len() as f64).sqrt())
            .map(|s| if s > 1e-12 { s } else { 1.0 })
            .collect();
        for part in [&mut train, &mut val] {
            for row in part.x.chunks_mut(f) {
                for ((v, m), s) in row.iter_mut().zip(&mean).zip(&scale) {
                    *v = ((*v as f64 - m) / s) as f32;
                }
            }
        }
        Ok(Split { train, val })
    }

    fn rows(&self, rows: &[usize]) -> Dataset {
        let f = self.features;
        Dataset {
            name: self.name.clone(),
            x: rows
                .iter()
                .flat_map(|&r| &self.x[r * f..(r + 1) * f])
                .copied()
                .collect(),
            y: rows.iter().map(|&r| self.y[r]).collect(),
            features: f,
            classes: self.classes,
            image: self.image,
        }
    }
}

/// Training and validation parts of one dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    pub train: Dataset,
    pub val: Dataset,
}

impl Split {
    /// The dataset `name` that tune ships or draws (`digits`, `wine`, `glyphs`, ...) with
    /// `[objective]`'s defaults for the rest: what `dataset = "NAME"` alone trains on.
    ///
    /// ```
    /// let split = tune_trials::Split::shipped("wine").unwrap();
    /// assert_eq!(split.train.len() + split.val.len(), 178);
    /// assert!(tune_trials::Split::shipped("mnist").is_err());
    /// ```
    pub fn shipped(name: &str) -> Result<Split, TrialsError> {
        DataSpec {
            dataset: Some(name.into()),
            ..DataSpec::default()
        }
        .load(std::path::Path::new("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_datasets_have_their_documented_shapes() {
        let digits = Dataset::builtin("digits").unwrap();
        assert_eq!(
            (digits.len(), digits.features, digits.classes),
            (1797, 64, 10)
        );
        // scikit-learn's description: pixels are integers 0..16; classes are roughly balanced.
        assert!(digits
            .x
            .iter()
            .all(|&v| (0.0..=16.0).contains(&v) && v.fract() == 0.0));
        let per_class = (0..10).map(|c| digits.y.iter().filter(|&&y| y == c).count());
        assert!(per_class.into_iter().all(|n| (174..=183).contains(&n)));
        let wine = Dataset::builtin("wine").unwrap();
        assert_eq!((wine.len(), wine.features, wine.classes), (178, 13, 3));
        let bc = Dataset::builtin("breast_cancer").unwrap();
        assert_eq!((bc.len(), bc.features, bc.classes), (569, 30, 2));
        assert_eq!(bc.y.iter().filter(|&&y| y == 1).count(), 357); // benign
        let e = Dataset::builtin("digit").unwrap_err().to_string();
        assert!(e.contains("did you mean `digits`?"), "{e}");
    }

    #[test]
    fn split_is_seeded_disjoint_and_standardised_on_train() {
        let digits = Dataset::builtin("digits").unwrap();
        let a = digits.split(0.2, 7).unwrap();
        assert_eq!(a, digits.split(0.2, 7).unwrap());
        assert_ne!(a.val.y, digits.split(0.2, 8).unwrap().val.y);
        assert_eq!((a.train.len(), a.val.len()), (1438, 359));
        for j in 0..64 {
            let col: Vec<f64> = a
                .train
                .x
                .iter()
                .skip(j)
                .step_by(64)
                .map(|&v| v as f64)
                .collect();
            let mean = col.iter().sum::<f64>() / col.len() as f64;
            let sd =
                (col.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / col.len() as f64).sqrt();
            assert!(mean.abs() < 1e-5, "feature {j}: mean {mean}");
            assert!((sd - 1.0).abs() < 1e-4 || sd == 0.0, "feature {j}: sd {sd}");
        }
        // The label multiset is preserved.
        let mut all: Vec<u32> = a.train.y.iter().chain(&a.val.y).copied().collect();
        let mut orig = digits.y.clone();
        all.sort_unstable();
        orig.sort_unstable();
        assert_eq!(all, orig);
    }
}
