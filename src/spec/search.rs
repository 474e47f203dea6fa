//! `[search]`: the algorithm, its options, initial points and warm starts.

use super::*;

/// `[search]`: the algorithm with its options, and the points its first trials evaluate.
///
/// ```
/// let spec = tune::ExperimentSpec::from_toml(r#"
///     name = "warm"
///     metric = "loss"
///     samples = 10
///     [search]
///     algorithm = "tpe"
///     [[search.initial]]
///     lr = 0.01
///     layers = 2
///     [space]
///     lr = { loguniform = [1e-4, 1e-1] }
///     layers = { int = [1, 4] }
/// "#, "space.toml".as_ref()).unwrap();
/// assert_eq!(spec.search.algorithm.algorithm(), tune::Algorithm::Tpe);
/// assert_eq!(spec.search.initial[0].get("layers"), Some(&tune::Value::Int(2)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Search {
    /// The algorithm, by its `algorithm` key, with its options.
    #[serde(flatten)]
    pub algorithm: SearchSpec,
    /// `[[search.initial]]`: params the first trials evaluate, in order, before the algorithm
    /// suggests any (Optuna's `enqueue_trial`, Ray Tune's `points_to_evaluate`). A point may
    /// leave parameters out: they are drawn at random. They count toward `samples`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub initial: Vec<Params>,
    /// Trials of an earlier sweep the algorithm learns from as its oldest (`tune run
    /// --warm-start`, SageMaker's warm start): copied into the sweep when it is created, so
    /// that a resume decides as the first run did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_start: Option<WarmStart>,
}

/// An earlier sweep's completed trials, as `--warm-start` found them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmStart {
    /// Where they came from (the folder or the store's experiment name), for people.
    pub from: String,
    pub trials: Vec<PriorTrial>,
}

impl From<SearchSpec> for Search {
    fn from(algorithm: SearchSpec) -> Search {
        Search {
            algorithm,
            initial: Vec::new(),
            warm_start: None,
        }
    }
}

// By hand: `initial` sits beside the algorithm's own keys, which its tagged enum checks
// strictly (an unknown key is an error), so it is taken out of the table first. The table is
// read as TOML values, and a null (an unset option in the stored JSON copy) as left out.
impl<'de> Deserialize<'de> for Search {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Search, D::Error> {
        use serde::de::Error;
        let mut table = table_without_nulls(d)?;
        let initial = match table.remove("initial") {
            Some(points) => Vec::<Params>::deserialize(points).map_err(|e| {
                D::Error::custom(format!(
                    "`initial`: expected tables of parameter values ([[search.initial]]), {e}"
                ))
            })?,
            None => Vec::new(),
        };
        let warm_start = table
            .remove("warm_start")
            .map(WarmStart::deserialize)
            .transpose()
            .map_err(|e| D::Error::custom(format!("`warm_start`: {e}")))?;
        let algorithm =
            tagged_naming_the_key::<SearchSpec>(table, "algorithm").map_err(D::Error::custom)?;
        Ok(Search {
            algorithm,
            initial,
            warm_start,
        })
    }
}

/// `[search]`: the algorithm and its options (`algorithm = "tpe"` takes any of
/// [`TpeOptions`] by its name; random and grid search have none).
///
/// ```
/// use tune::{SearchSpec, TpeOptions};
/// let tpe = SearchSpec::Tpe(TpeOptions { n_ei_candidates: 64, ..Default::default() });
/// assert_eq!(tpe.algorithm(), tune::Algorithm::Tpe);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "algorithm", rename_all = "lowercase", deny_unknown_fields)]
pub enum SearchSpec {
    /// Independent uniform draws from the space.
    Random {},
    /// Every combination of the `grid` parameters, `samples` times over.
    Grid {},
    /// The tree-structured Parzen estimator.
    Tpe(TpeOptions),
    /// Bayesian optimisation with a Gaussian process (Optuna's GPSampler's model and
    /// acquisition); spaces without conditions.
    Gp(GpOptions),
    /// The genetic algorithm NSGA-II (Optuna's NSGAIISampler), for several objectives.
    Nsga2(Nsga2Options),
    /// A GP or TPE for each suggestion, by the sweep's space, objectives, scheduler and how
    /// many trials have completed ([`tune_search::AutoSearch`]); each with its default
    /// options but the GP's noise floor, which [`AutoOptions`] keeps. The default.
    Auto(AutoOptions),
}

impl Default for SearchSpec {
    fn default() -> Self {
        SearchSpec::Auto(AutoOptions::default())
    }
}

impl SearchSpec {
    pub fn algorithm(&self) -> Algorithm {
        match self {
            SearchSpec::Random {} => Algorithm::Random,
            SearchSpec::Grid {} => Algorithm::Grid,
            SearchSpec::Tpe(_) => Algorithm::Tpe,
            SearchSpec::Gp(_) => Algorithm::Gp,
            SearchSpec::Nsga2(_) => Algorithm::Nsga2,
            SearchSpec::Auto(_) => Algorithm::Auto,
        }
    }

    /// The algorithm with its default options.
    pub fn of(algorithm: Algorithm) -> SearchSpec {
        match algorithm {
            Algorithm::Random => SearchSpec::Random {},
            Algorithm::Grid => SearchSpec::Grid {},
            Algorithm::Tpe => SearchSpec::Tpe(TpeOptions::default()),
            Algorithm::Gp => SearchSpec::Gp(GpOptions::default()),
            Algorithm::Nsga2 => SearchSpec::Nsga2(Nsga2Options::default()),
            Algorithm::Auto => SearchSpec::Auto(AutoOptions::default()),
        }
    }
}

/// The search algorithm, by name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Independent uniform draws from the space.
    Random,
    /// Every combination of the `grid` parameters.
    Grid,
    /// The tree-structured Parzen estimator (Bergstra et al. 2011; Optuna 5's multivariate TPE).
    Tpe,
    /// Bayesian optimisation with a Gaussian process (Matérn 5/2, log expected improvement).
    Gp,
    /// NSGA-II (Deb et al. 2002), a genetic algorithm for several objectives.
    Nsga2,
    /// A GP or TPE for each suggestion, chosen by the sweep's shape and history (the
    /// default).
    #[default]
    Auto,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Random => "random",
            Algorithm::Grid => "grid",
            Algorithm::Tpe => "tpe",
            Algorithm::Gp => "gp",
            Algorithm::Nsga2 => "nsga2",
            Algorithm::Auto => "auto",
        }
    }
}

impl ExperimentSpec {
    /// TPE's options for this experiment (`None` for another algorithm): `[search]`'s, as
    /// [`TpeOptions::under_rungs`] makes them under ASHA, [`TpeOptions::under_hyperband`]
    /// under HyperBand and
    /// [`TpeOptions::under_scheduler`] under median stopping or PBT.
    ///
    /// ```
    /// let spec = tune::ExperimentSpec::from_toml(
    ///     "name = \"demo\"\nmetric = \"loss\"\nsamples = 8\n[search]\nalgorithm = \"tpe\"\n[scheduler]\nkind = \"asha\"\n[space]\nx = { uniform = [0.0, 1.0] }",
    ///     "space.toml".as_ref(),
    /// ).unwrap();
    /// let tpe = spec.tpe_options().unwrap();
    /// assert_eq!(tpe.stopped_min_depth(), 0.1);
    /// assert_eq!(tpe.kernel_floors(), (0.01, 1.0, 0.0));
    /// ```
    pub fn tpe_options(&self) -> Option<TpeOptions> {
        let SearchSpec::Tpe(tpe) = &self.search.algorithm else {
            return None;
        };
        Some(self.tpe_under_scheduler(tpe.clone()))
    }

    /// TPE's options `tpe` as this spec's scheduler makes them.
    fn tpe_under_scheduler(&self, tpe: TpeOptions) -> TpeOptions {
        match self.scheduler {
            SchedulerSpec::Fifo {} => tpe,
            SchedulerSpec::Asha(_) => tpe.under_rungs(),
            SchedulerSpec::Hyperband(_) => tpe.under_hyperband(),
            SchedulerSpec::Median(_) | SchedulerSpec::Pbt(_) => tpe.under_scheduler(),
        }
    }

    /// What `algorithm = "auto"` knows of this sweep before it runs.
    pub fn sweep_shape(&self) -> SweepShape {
        SweepShape {
            objectives: self.objectives.len().max(1),
            early_stopping: match self.scheduler {
                SchedulerSpec::Fifo {} => EarlyStopping::None,
                SchedulerSpec::Asha(_) | SchedulerSpec::Hyperband(_) => EarlyStopping::Rungs,
                SchedulerSpec::Median(_) | SchedulerSpec::Pbt(_) => EarlyStopping::Scheduler,
            },
            samples: Some(self.samples),
        }
    }

    /// The search algorithm this spec asks for, with its options.
    pub fn make_searcher(&self) -> Result<Box<dyn Searcher>, SearcherError> {
        let space = self.space.clone();
        let searcher: Box<dyn Searcher> = match &self.search.algorithm {
            SearchSpec::Random {} => Box::new(RandomSearch::new(space, self.seed)),
            SearchSpec::Grid {} => Box::new(GridSearch::new(space, self.seed)?),
            SearchSpec::Tpe(_) => {
                let options = self.tpe_options().unwrap_or_default();
                Box::new(Tpe::new(space, self.seed, options))
            }
            SearchSpec::Gp(options) => Box::new(GpSearch::new(space, self.seed, options.clone())?),
            SearchSpec::Nsga2(options) => Box::new(Nsga2::new(space, self.seed, options.clone())),
            SearchSpec::Auto(options) => Box::new(AutoSearch::new(
                space,
                self.seed,
                self.sweep_shape(),
                self.tpe_under_scheduler(TpeOptions::default()),
                options,
            )),
        };
        let searcher: Box<dyn Searcher> = match &self.search.warm_start {
            Some(warm) => Box::new(WithPriorTrials::new(warm.trials.clone(), searcher)),
            None => searcher,
        };
        if self.search.initial.is_empty() {
            return Ok(searcher);
        }
        let points = self.initial_points()?;
        Ok(Box::new(WithInitialPoints::new(
            points,
            self.space.clone(),
            self.seed,
            searcher,
        )))
    }

    /// `[[search.initial]]` checked against the space (numbered from 1 in errors).
    pub(super) fn initial_points(&self) -> Result<Vec<Params>, SearcherError> {
        self.search
            .initial
            .iter()
            .enumerate()
            .map(|(i, p)| {
                self.space
                    .check_point(p)
                    .map_err(|error| SearcherError::InitialPoint {
                        number: i + 1,
                        error,
                    })
            })
            .collect()
    }

    /// `grid` parameters belong to grid search.
    pub(super) fn validate_grid(&self) -> Result<(), InvalidSetting> {
        if !matches!(self.search.algorithm, SearchSpec::Grid {}) {
            // Drawn like a choice by random search and TPE, which is rarely what was meant.
            let grid = self
                .space
                .params()
                .iter()
                .find(|p| matches!(p.domain, Domain::Grid(_)));
            if let Some(p) = grid {
                return Err(InvalidSetting::new(
                    "space",
                    FieldError::new(
                        &p.name,
                        format!(
                            "a `grid` parameter is enumerated only by `[search] algorithm = \"grid\"`, and this sweep's is \"{}\"; use `choice` to have it drawn at random",
                            self.search.algorithm.algorithm().as_str()
                        ),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `[[search.initial]]`: points in the space, within the budget, not for grid search.
    pub(super) fn validate_initial(&self) -> Result<(), InvalidSetting> {
        if !self.search.initial.is_empty() {
            let initial = |message: String| {
                Err(InvalidSetting::new(
                    "search",
                    FieldError::new("initial", message),
                ))
            };
            if matches!(self.search.algorithm, SearchSpec::Grid {}) {
                return initial(
                    "grid search enumerates its grid and takes no initial points: use \
                     algorithm = \"random\", \"tpe\" or \"gp\""
                        .to_string(),
                );
            }
            if self.search.initial.len() as u64 > self.samples {
                return initial(format!(
                    "{} initial points, but samples = {}: the points count toward samples",
                    self.search.initial.len(),
                    self.samples
                ));
            }
            if let Err(SearcherError::InitialPoint { number, error }) = self.initial_points() {
                // Keyed `initial[N].name`, so that the error points at that line of the N-th
                // [[search.initial]] table.
                let text = error.to_string();
                let prefix = format!("`{}`: ", error.name());
                return Err(InvalidSetting::new(
                    "search",
                    FieldError::new(
                        format!("initial[{number}].{}", error.name()),
                        text.strip_prefix(&prefix).unwrap_or(&text),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A warm start: an algorithm that learns, trials in the space with finite values.
    pub(super) fn validate_warm_start(&self) -> Result<(), InvalidSetting> {
        if let Some(warm) = &self.search.warm_start {
            let warm_start = |message: String| {
                Err(InvalidSetting::new(
                    "search",
                    FieldError::new("warm_start", message),
                ))
            };
            if matches!(
                self.search.algorithm,
                SearchSpec::Random {} | SearchSpec::Grid {}
            ) {
                return warm_start(format!(
                    "{} search does not learn from earlier trials: use algorithm = \"tpe\" or \"gp\"",
                    self.search.algorithm.algorithm().as_str()
                ));
            }
            for (i, trial) in warm.trials.iter().enumerate() {
                if let Err(e) = self.space.check_point(&trial.params) {
                    return warm_start(format!("trial {} of {}: {e}", i + 1, warm.from));
                }
                if !trial.value.is_finite() {
                    return warm_start(format!(
                        "trial {} of {}: expected a finite value, found {}",
                        i + 1,
                        warm.from,
                        trial.value
                    ));
                }
            }
        }
        Ok(())
    }

    /// The algorithm's own options, and a space the algorithm can model.
    pub(super) fn validate_algorithm(&self) -> Result<(), InvalidSetting> {
        if let SearchSpec::Tpe(tpe) = &self.search.algorithm {
            tpe.validate()
                .map_err(|e| InvalidSetting::new("search", e))?;
        }
        if let SearchSpec::Auto(auto) = &self.search.algorithm {
            auto.validate()
                .map_err(|e| InvalidSetting::new("search", e))?;
        }
        if let SearchSpec::Gp(gp) = &self.search.algorithm {
            gp.validate()
                .map_err(|e| InvalidSetting::new("search", e))?;
            // The searcher's own rule, checked here so that it is exit 2 before anything runs.
            if let Err(ConditionalSpace(names)) = UnitSpace::new(&self.space) {
                let first = names[0].clone();
                return Err(InvalidSetting::new(
                    "space",
                    FieldError::new(&first, ConditionalSpace(vec![first.clone()]).to_string()),
                ));
            }
        }
        Ok(())
    }
}
