//! Several objectives: Pareto dominance, non-dominated sorting, crowding distance and
//! hypervolume. Every function here takes losses: lower is better in every objective
//! ([`History::losses`](crate::History::losses) turns a trial's values into them).

/// Whether `a` dominates `b`: no worse in any objective and better in at least one.
///
/// ```
/// use tune_search::pareto::dominates;
/// assert!(dominates(&[1.0, 2.0], &[1.0, 3.0]));
/// assert!(!dominates(&[1.0, 2.0], &[1.0, 2.0]));
/// assert!(!dominates(&[0.0, 3.0], &[1.0, 2.0]));
/// ```
pub fn dominates(a: &[f64], b: &[f64]) -> bool {
    let mut better = false;
    for (x, y) in a.iter().zip(b) {
        if x > y {
            return false;
        }
        better |= x < y;
    }
    better
}

/// The points sorted into fronts of equal non-domination rank, best first: front 0 is the
/// Pareto front, front 1 the front of what remains, and so on (Deb et al. 2002). Each front
/// lists indices into `points` in increasing order. Sorting stops once the fronts returned
/// hold at least `at_least` points (`usize::MAX`: every point).
///
/// ```
/// use tune_search::pareto::fronts;
/// let points = [vec![1.0, 4.0], vec![2.0, 2.0], vec![3.0, 3.0], vec![4.0, 1.0], vec![5.0, 5.0]];
/// assert_eq!(fronts(&points, usize::MAX), vec![vec![0, 1, 3], vec![2], vec![4]]);
/// assert_eq!(fronts(&points, 2), vec![vec![0, 1, 3]]);
/// ```
pub fn fronts<P: AsRef<[f64]>>(points: &[P], at_least: usize) -> Vec<Vec<usize>> {
    let mut left: Vec<usize> = (0..points.len()).collect();
    let mut out = Vec::new();
    let mut placed = 0;
    while !left.is_empty() && placed < at_least {
        let (front, rest): (Vec<usize>, Vec<usize>) = left.iter().partition(|&&i| {
            !left
                .iter()
                .any(|&j| dominates(points[j].as_ref(), points[i].as_ref()))
        });
        placed += front.len();
        out.push(front);
        left = rest;
    }
    out
}

/// Each point's crowding distance within its front (NSGA-II): per objective, the gap between
/// its two neighbours over the front's range, summed; the ends of each objective's range are
/// infinitely far. Objectives where every point is equal add nothing (Optuna's rule).
///
/// ```
/// use tune_search::pareto::crowding_distances;
/// let front = [vec![0.0, 4.0], vec![1.0, 2.0], vec![3.0, 1.0], vec![4.0, 0.0]];
/// let d = crowding_distances(&front);
/// assert!(d[0].is_infinite() && d[3].is_infinite());
/// assert_eq!(d[1], 3.0 / 4.0 + 3.0 / 4.0);
/// assert_eq!(d[2], 3.0 / 4.0 + 2.0 / 4.0);
/// ```
pub fn crowding_distances<P: AsRef<[f64]>>(front: &[P]) -> Vec<f64> {
    let n = front.len();
    let mut distance = vec![0.0; n];
    let Some(objectives) = front.first().map(|p| p.as_ref().len()) else {
        return distance;
    };
    let mut order: Vec<usize> = (0..n).collect();
    for m in 0..objectives {
        let value = |i: usize| front[i].as_ref()[m];
        order.sort_by(|&a, &b| value(a).total_cmp(&value(b)).then(a.cmp(&b)));
        let width = value(order[n - 1]) - value(order[0]);
        if width == 0.0 || !width.is_finite() {
            continue;
        }
        distance[order[0]] = f64::INFINITY;
        distance[order[n - 1]] = f64::INFINITY;
        for j in 1..n.saturating_sub(1) {
            distance[order[j]] += (value(order[j + 1]) - value(order[j - 1])) / width;
        }
    }
    distance
}

/// The volume dominated by `points` and bounded by `reference`: the measure of the set of
/// points that some point of `points` dominates and that dominate `reference`. Points not
/// strictly below `reference` in every objective add nothing. Exact: a sweep in two
/// dimensions, slices along the last objective above that (fine for the few hundred points of
/// a sweep's front; WFG would be faster in many dimensions).
///
/// ```
/// use tune_search::pareto::hypervolume;
/// // Two boxes of 2 x 1 and 1 x 2 overlapping in 1 x 1.
/// assert_eq!(hypervolume(&[vec![1.0, 2.0], vec![2.0, 1.0]], &[3.0, 3.0]), 3.0);
/// assert_eq!(hypervolume(&[vec![0.0, 0.0, 0.0]], &[1.0, 2.0, 3.0]), 6.0);
/// assert_eq!(hypervolume(&[vec![4.0, 0.0]], &[3.0, 3.0]), 0.0);
/// ```
pub fn hypervolume<P: AsRef<[f64]>>(points: &[P], reference: &[f64]) -> f64 {
    let mut inside: Vec<&[f64]> = points
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| p.len() == reference.len() && p.iter().zip(reference).all(|(x, r)| x < r))
        .collect();
    volume(&mut inside, reference)
}

/// [`hypervolume`] of points already known to lie below `reference` (reorders them).
fn volume(points: &mut [&[f64]], reference: &[f64]) -> f64 {
    let d = reference.len();
    if points.is_empty() {
        return 0.0;
    }
    match d {
        0 => 0.0,
        1 => reference[0] - points.iter().map(|p| p[0]).fold(f64::INFINITY, f64::min),
        2 => {
            points.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
            let mut lowest = reference[1];
            let mut sum = 0.0;
            for p in points.iter() {
                if p[1] < lowest {
                    sum += (reference[0] - p[0]) * (lowest - p[1]);
                    lowest = p[1];
                }
            }
            sum
        }
        _ => {
            // Slices between consecutive values of the last objective: the slice above the
            // i-th lowest is dominated by the first i + 1 points, projected.
            points.sort_by(|a, b| a[d - 1].total_cmp(&b[d - 1]));
            let mut sum = 0.0;
            let mut projected: Vec<&[f64]> = Vec::with_capacity(points.len());
            for i in 0..points.len() {
                projected.push(&points[i][..d - 1]);
                let top = points.get(i + 1).map_or(reference[d - 1], |p| p[d - 1]);
                let height = top - points[i][d - 1];
                if height > 0.0 {
                    let mut slice = projected.clone();
                    sum += height * volume(&mut slice, &reference[..d - 1]);
                }
            }
            sum
        }
    }
}

/// Each point's exclusive contribution: the hypervolume lost without it.
///
/// ```
/// use tune_search::pareto::hypervolume_contributions;
/// let c = hypervolume_contributions(&[vec![1.0, 2.0], vec![2.0, 1.0]], &[3.0, 3.0]);
/// assert_eq!(c, vec![1.0, 1.0]);
/// ```
pub fn hypervolume_contributions<P: AsRef<[f64]>>(points: &[P], reference: &[f64]) -> Vec<f64> {
    let all: Vec<&[f64]> = points.iter().map(|p| p.as_ref()).collect();
    let total = hypervolume(&all, reference);
    (0..all.len())
        .map(|i| {
            let others: Vec<&[f64]> = all
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, p)| *p)
                .collect();
            (total - hypervolume(&others, reference)).max(0.0)
        })
        .collect()
}

/// `k` of `points` chosen greedily for the largest hypervolume: each step adds the point that
/// adds the most (ties to the lower index). The hypervolume subset selection MOTPE uses to
/// break ties in the last front it splits (Optuna's `_solve_hssp`, greedy). Indices returned
/// in the order chosen.
///
/// What a point adds can only shrink as the chosen set grows, so the gain a point had when
/// last computed bounds its gain now: only the point on top of those bounds is recomputed,
/// and it is taken once its gain is current and no other bound is within rounding of it (lazy
/// greedy, Minoux 1978). The choices are the plain greedy's, gains computed in the same
/// arithmetic, ties to the lower index; most gains are never recomputed.
///
/// ```
/// use tune_search::pareto::greedy_hypervolume_subset;
/// let points = [vec![1.0, 4.0], vec![2.0, 2.0], vec![4.0, 1.0], vec![2.1, 2.1]];
/// assert_eq!(greedy_hypervolume_subset(&points, &[5.0, 5.0], 2), vec![1, 0]);
/// ```
pub fn greedy_hypervolume_subset<P: AsRef<[f64]>>(
    points: &[P],
    reference: &[f64],
    k: usize,
) -> Vec<usize> {
    let k = k.min(points.len());
    let mut chosen: Vec<usize> = Vec::with_capacity(k);
    let mut chosen_points: Vec<&[f64]> = Vec::with_capacity(k + 1);
    let mut base = 0.0;
    let mut heap: std::collections::BinaryHeap<Bound> = (0..points.len())
        .map(|index| Bound {
            gain: gain_of(points[index].as_ref(), &mut chosen_points, reference, base),
            index,
            fresh_at: 0,
        })
        .collect();
    let mut stale: Vec<usize> = Vec::new();
    while chosen.len() < k {
        let Some(top) = heap.pop() else { break };
        let step = chosen.len();
        if top.fresh_at == step {
            // A bound a rounding error above its true gain could hide a tie the plain greedy
            // breaks by index: refresh every bound that close before taking the top.
            let close = top.gain - 1e-9 * (base.abs() + top.gain.abs());
            stale.clear();
            heap.retain(|b| {
                let refresh = b.fresh_at != step && b.gain >= close;
                if refresh {
                    stale.push(b.index);
                }
                !refresh
            });
            if stale.is_empty() {
                chosen.push(top.index);
                chosen_points.push(points[top.index].as_ref());
                base += top.gain;
                continue;
            }
            heap.push(top);
            for &index in &stale {
                heap.push(Bound {
                    gain: gain_of(points[index].as_ref(), &mut chosen_points, reference, base),
                    index,
                    fresh_at: step,
                });
            }
        } else {
            heap.push(Bound {
                gain: gain_of(
                    points[top.index].as_ref(),
                    &mut chosen_points,
                    reference,
                    base,
                ),
                index: top.index,
                fresh_at: step,
            });
        }
    }
    chosen
}

/// [`greedy_hypervolume_subset`]'s bound on a point's gain, as of the step `fresh_at`; the
/// heap's top is the largest gain, then the lowest index.
struct Bound {
    gain: f64,
    index: usize,
    fresh_at: usize,
}
impl PartialEq for Bound {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Bound {}
impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.gain
            .total_cmp(&other.gain)
            .then(other.index.cmp(&self.index))
    }
}

/// What `p` adds to `chosen` (of hypervolume `base`).
fn gain_of<'a>(p: &'a [f64], chosen: &mut Vec<&'a [f64]>, reference: &[f64], base: f64) -> f64 {
    chosen.push(p);
    let gain = hypervolume(chosen, reference) - base;
    chosen.pop();
    gain
}

/// The reference point MOTPE measures a set of losses against: 10% beyond the worst value of
/// each objective, away from zero (Optuna's `_get_reference_point`; an exact zero becomes
/// 1e-12).
///
/// ```
/// use tune_search::pareto::reference_point;
/// assert_eq!(reference_point(&[vec![1.0, -2.0], vec![2.0, -4.0]]), vec![2.2, -1.8]);
/// ```
pub fn reference_point<P: AsRef<[f64]>>(points: &[P]) -> Vec<f64> {
    let Some(d) = points.first().map(|p| p.as_ref().len()) else {
        return Vec::new();
    };
    (0..d)
        .map(|m| {
            let worst = points
                .iter()
                .map(|p| p.as_ref()[m])
                .fold(f64::NEG_INFINITY, f64::max);
            let r = (1.1 * worst).max(0.9 * worst);
            if r == 0.0 {
                1e-12
            } else {
                r
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Monte Carlo estimate of the dominated volume, for checking the exact one.
    fn sampled_volume(points: &[Vec<f64>], reference: &[f64], n: usize) -> f64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let low: Vec<f64> = (0..reference.len())
            .map(|m| points.iter().map(|p| p[m]).fold(f64::INFINITY, f64::min))
            .collect();
        let box_volume: f64 = low.iter().zip(reference).map(|(l, r)| r - l).product();
        let mut hits = 0;
        for _ in 0..n {
            let x: Vec<f64> = low
                .iter()
                .zip(reference)
                .map(|(l, r)| rng.random_range(*l..*r))
                .collect();
            if points.iter().any(|p| p.iter().zip(&x).all(|(a, b)| a <= b)) {
                hits += 1;
            }
        }
        box_volume * hits as f64 / n as f64
    }

    #[test]
    fn hypervolume_by_hand_in_three_dimensions() {
        // Unit cubes at the corners [0,1]^3 shifted: boxes [0,2]x[1,2]x[1,2]... worked by
        // inclusion-exclusion: A = (0,1,1), B = (1,0,1), C = (1,1,0), reference (2,2,2):
        // each box 2 x 1 x 1 = 2, pairwise overlaps 1 x 1 x 1 = 1, triple overlap 1.
        let points = [
            vec![0.0, 1.0, 1.0],
            vec![1.0, 0.0, 1.0],
            vec![1.0, 1.0, 0.0],
        ];
        assert_eq!(
            hypervolume(&points, &[2.0, 2.0, 2.0]),
            3.0 * 2.0 - 3.0 + 1.0
        );
        // A dominated point and one on the reference change nothing.
        let mut more = points.to_vec();
        more.push(vec![1.5, 1.5, 1.5]);
        more.push(vec![0.0, 0.0, 2.0]);
        assert_eq!(hypervolume(&more, &[2.0, 2.0, 2.0]), 4.0);
    }

    #[test]
    fn hypervolume_agrees_with_sampling_on_random_fronts() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for d in 2..=4 {
            let points: Vec<Vec<f64>> = (0..12)
                .map(|_| (0..d).map(|_| rng.random_range(0.0..1.0)).collect())
                .collect();
            let reference = vec![1.2; d];
            let exact = hypervolume(&points, &reference);
            let sampled = sampled_volume(&points, &reference, 200_000);
            assert!(
                (exact - sampled).abs() < 0.01 * exact,
                "d = {d}: exact {exact}, sampled {sampled}"
            );
        }
    }

    #[test]
    fn fronts_rank_every_point_once() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let points: Vec<Vec<f64>> = (0..40)
            .map(|_| (0..3).map(|_| rng.random_range(0.0..1.0)).collect())
            .collect();
        let fronts = fronts(&points, usize::MAX);
        let mut seen: Vec<usize> = fronts.concat();
        seen.sort();
        assert_eq!(seen, (0..40).collect::<Vec<_>>());
        for (r, front) in fronts.iter().enumerate() {
            for &i in front {
                // Nothing in its own front or a later one dominates it; something in the
                // front before does.
                let later = fronts[r..].concat();
                assert!(!later.iter().any(|&j| dominates(&points[j], &points[i])));
                if r > 0 {
                    assert!(fronts[r - 1]
                        .iter()
                        .any(|&j| dominates(&points[j], &points[i])));
                }
            }
        }
    }

    /// The greedy subset by recomputing every gain at every step.
    fn plain_greedy(points: &[Vec<f64>], reference: &[f64], k: usize) -> Vec<usize> {
        let mut chosen: Vec<usize> = Vec::new();
        let mut base = 0.0;
        while chosen.len() < k.min(points.len()) {
            let mut best: Option<(usize, f64)> = None;
            for i in (0..points.len()).filter(|i| !chosen.contains(i)) {
                let mut with: Vec<&[f64]> = chosen.iter().map(|&j| points[j].as_slice()).collect();
                with.push(&points[i]);
                let gain = hypervolume(&with, reference) - base;
                if best.is_none_or(|(_, g)| gain > g) {
                    best = Some((i, gain));
                }
            }
            let (i, gain) = best.expect("a point left");
            chosen.push(i);
            base += gain;
        }
        chosen
    }

    #[test]
    fn lazy_greedy_subset_chooses_as_the_plain_greedy() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        for d in 2..=4 {
            for trial in 0..20 {
                // A front-like cloud (on a sphere, jittered), some points repeated and some on
                // a grid, so that ties happen.
                let mut points: Vec<Vec<f64>> = (0..30)
                    .map(|_| {
                        let v: Vec<f64> = (0..d).map(|_| rng.random_range(0.05..1.0)).collect();
                        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                        v.iter()
                            .map(|x| {
                                let y = x / norm + rng.random_range(0.0..0.1);
                                if trial % 2 == 0 {
                                    (y * 4.0).round() / 4.0
                                } else {
                                    y
                                }
                            })
                            .collect()
                    })
                    .collect();
                points.push(points[3].clone());
                let reference = reference_point(&points);
                for k in [1, 5, 17, 31] {
                    assert_eq!(
                        greedy_hypervolume_subset(&points, &reference, k),
                        plain_greedy(&points, &reference, k),
                        "d = {d}, trial {trial}, k = {k}"
                    );
                }
            }
        }
    }

    #[test]
    fn greedy_subset_takes_the_largest_box_first() {
        // (2, 2)'s box against (5, 5) is 9; (1, 4)'s and (4, 1)'s are 4 each.
        let points = [vec![1.0, 4.0], vec![4.0, 1.0], vec![2.0, 2.0]];
        assert_eq!(greedy_hypervolume_subset(&points, &[5.0, 5.0], 1), vec![2]);
        // Then either corner adds 4 - 1 = 3 (its box less the overlap): the lower index.
        assert_eq!(
            greedy_hypervolume_subset(&points, &[5.0, 5.0], 3),
            vec![2, 0, 1]
        );
    }
}
