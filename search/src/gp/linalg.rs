//! The linear algebra of the process, bit for bit the same on every CPU: dot products in a
//! fixed order, the Cholesky factor and the inverses a posterior needs, AVX2 where the CPU
//! has it (the same additions in wider registers).

/// Why a model could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpError {
    #[error("the covariance matrix is not positive definite, even with jitter {jitter:e}")]
    NotPositiveDefinite { jitter: f64 },
    #[error("expected {expected} values per point, found {found}")]
    Dimensions { expected: usize, found: usize },
}

/// Jitter added to the diagonal when a Cholesky factorisation fails: from 1e-10 of the
/// diagonal's mean, ten times more on each retry, up to 1e-4 of it.
pub(super) const JITTER_FIRST: f64 = 1e-10;
pub(super) const JITTER_LAST: f64 = 1e-4;

/// Points per block in [`GpRegressor::posteriors`]: their kernel rows (8 x 300 values at 300
/// trials) and a row of the factor stay in the nearest cache together.
pub(super) const POSTERIOR_BLOCK: usize = 8;

/// [`dot`] of `row` with the first `row.len()` values of each of the block's points' kernel
/// rows, given interleaved (`interleaved[c][p][l]` is point p's value 4c + l), to the bit,
/// with the points' sums interleaved: one point's four running sums wait on each other's
/// additions, several points' do not.
#[inline(always)]
pub(super) fn block_dots(
    row: &[f64],
    interleaved: &[[[f64; 4]; POSTERIOR_BLOCK]],
) -> [f64; POSTERIOR_BLOCK] {
    let len = row.len();
    let whole = len / 4;
    let mut sums = [[0.0; 4]; POSTERIOR_BLOCK];
    for (r, chunk) in row.chunks_exact(4).zip(&interleaved[..whole]) {
        for (point, k) in sums.iter_mut().zip(chunk) {
            for l in 0..4 {
                point[l] += r[l] * k[l];
            }
        }
    }
    block_dots_total(row, interleaved, &sums)
}

/// AVX2's [`block_dots`], the same additions and products in the same order, one vector per
/// point: left to itself, the compiler vectorised the portable loop across points instead,
/// shuffling every chunk, and that was half of a suggestion's time at 300 trials.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) fn block_dots_avx2(
    row: &[f64],
    interleaved: &[[[f64; 4]; POSTERIOR_BLOCK]],
) -> [f64; POSTERIOR_BLOCK] {
    use std::arch::x86_64::{
        _mm256_add_pd, _mm256_loadu_pd, _mm256_mul_pd, _mm256_setzero_pd, _mm256_storeu_pd,
    };
    let whole = row.len() / 4;
    let mut acc = [_mm256_setzero_pd(); POSTERIOR_BLOCK];
    for (r, chunk) in row.chunks_exact(4).zip(&interleaved[..whole]) {
        // SAFETY: `r` and each `chunk[p]` hold four f64s.
        let r = unsafe { _mm256_loadu_pd(r.as_ptr()) };
        for (acc, k) in acc.iter_mut().zip(chunk) {
            // SAFETY: `k` holds four f64s.
            let k = unsafe { _mm256_loadu_pd(k.as_ptr()) };
            *acc = _mm256_add_pd(*acc, _mm256_mul_pd(r, k));
        }
    }
    let mut sums = [[0.0; 4]; POSTERIOR_BLOCK];
    for (sum, acc) in sums.iter_mut().zip(acc) {
        // SAFETY: `sum` holds four f64s.
        unsafe { _mm256_storeu_pd(sum.as_mut_ptr(), acc) };
    }
    block_dots_total(row, interleaved, &sums)
}

/// Each point's four running sums and the row's last `len % 4` products, added in
/// [`dot`]'s order.
#[inline(always)]
pub(super) fn block_dots_total(
    row: &[f64],
    interleaved: &[[[f64; 4]; POSTERIOR_BLOCK]],
    sums: &[[f64; 4]; POSTERIOR_BLOCK],
) -> [f64; POSTERIOR_BLOCK] {
    let whole = row.len() / 4;
    let mut out = [0.0; POSTERIOR_BLOCK];
    let tail_row = &row[whole * 4..];
    for (p, (o, point)) in out.iter_mut().zip(sums).enumerate() {
        let tail: f64 = match interleaved.get(whole) {
            Some(chunk) => tail_row.iter().zip(&chunk[p]).map(|(x, y)| x * y).sum(),
            None => 0.0,
        };
        *o = (point[0] + point[1]) + (point[2] + point[3]) + tail;
    }
    out
}

/// The dot product of two slices summed in order from 0: a posterior's mean, which the
/// block of [`GpRegressor::posteriors`] works for eight points side by side.
#[inline(always)]
pub(super) fn in_order_dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).fold(0.0, |sum, (x, y)| sum + x * y)
}

/// The dot product of two slices, in four running sums (which the compiler vectorises; one
/// sum in order it cannot).
#[inline(always)]
pub(super) fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut sums = [0.0; 4];
    let (a4, b4) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = a4
        .remainder()
        .iter()
        .zip(b4.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a4.zip(b4) {
        for k in 0..4 {
            sums[k] += x[k] * y[k];
        }
    }
    (sums[0] + sums[1]) + (sums[2] + sums[3]) + tail
}

/// Rows the factorisations below take together: each entry of a target row is loaded and
/// stored once for four updates (in their order, so the results are the one-at-a-time
/// results to the bit) instead of once per update, which kept them waiting on memory.
pub(super) const PANEL: usize = 4;

/// The upper Cholesky factor U (row-major, U^T U = `a`) of the symmetric `n` x `n` matrix
/// `a`, right-looking: every update is a contiguous row minus multiples of others, which the
/// compiler vectorises (a dot product per entry it cannot, for the order of its sum).
#[inline(always)]
pub(super) fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut u = a.to_vec();
    let mut k0 = 0;
    while k0 < n {
        let end = (k0 + PANEL).min(n);
        // The panel's rows one at a time, updating each other.
        for k in k0..end {
            let d = u[k * n + k];
            if d <= 0.0 || !d.is_finite() {
                return None;
            }
            let d = d.sqrt();
            let (done, rest) = u.split_at_mut((k + 1) * n);
            let row = &mut done[k * n..];
            row[k] = d;
            row[k + 1..].iter_mut().for_each(|x| *x /= d);
            for j in k + 1..end {
                let c = row[j];
                let target = &mut rest[(j - k - 1) * n + j..(j - k) * n];
                for (t, r) in target.iter_mut().zip(&row[j..]) {
                    *t -= c * r;
                }
            }
        }
        // The rows below, by the panel's four together (a short panel is the last one).
        if end - k0 == PANEL {
            let (panel, rest) = u.split_at_mut(end * n);
            let rows: [&[f64]; PANEL] =
                std::array::from_fn(|m| &panel[(k0 + m) * n..(k0 + m + 1) * n]);
            for j in end..n {
                let c: [f64; PANEL] = std::array::from_fn(|m| rows[m][j]);
                let target = &mut rest[(j - end) * n + j..(j - end + 1) * n];
                for ((((t, r0), r1), r2), r3) in target
                    .iter_mut()
                    .zip(&rows[0][j..])
                    .zip(&rows[1][j..])
                    .zip(&rows[2][j..])
                    .zip(&rows[3][j..])
                {
                    *t = (((*t - c[0] * r0) - c[1] * r1) - c[2] * r2) - c[3] * r3;
                }
            }
        }
        k0 = end;
    }
    // The strict lower part held the input; the factor is upper triangular.
    for i in 0..n {
        u[i * n..i * n + i].iter_mut().for_each(|x| *x = 0.0);
    }
    Some(u)
}

/// [`cholesky`], retried with growing jitter on the diagonal when it fails.
#[inline(always)]
pub(super) fn cholesky_with_jitter(a: &[f64], n: usize) -> Result<(Vec<f64>, bool), GpError> {
    if let Some(l) = cholesky(a, n) {
        return Ok((l, false));
    }
    let mean_diag = (0..n).map(|i| a[i * n + i].abs()).sum::<f64>() / n.max(1) as f64;
    let mut jitter = JITTER_FIRST * mean_diag.max(1e-12);
    loop {
        let mut b = a.to_vec();
        for i in 0..n {
            b[i * n + i] += jitter;
        }
        if let Some(l) = cholesky(&b, n) {
            return Ok((l, true));
        }
        if jitter >= JITTER_LAST * mean_diag.max(1e-12) {
            return Err(GpError::NotPositiveDefinite { jitter });
        }
        jitter *= 10.0;
    }
}

/// U^-1 of an upper triangular `u` (row-major), from the last row up: row i of U^-1 is
/// (e_i - sum_{k>i} U_ik row k) / U_ii, so every step is on contiguous rows ([`PANEL`] rows k
/// at a time).
#[inline(always)]
pub(super) fn upper_inverse(u: &[f64], n: usize) -> Vec<f64> {
    let mut inv = vec![0.0; n * n];
    for i in (0..n).rev() {
        let (head, done) = inv.split_at_mut((i + 1) * n);
        // Column x of the row at row[x - i].
        let row = &mut head[i * n + i..];
        row[0] = 1.0;
        let below = |k: usize| &done[(k - i - 1) * n..(k - i) * n];
        let mut k = i + 1;
        while k + PANEL <= n {
            let c: [f64; PANEL] = std::array::from_fn(|m| u[i * n + k + m]);
            let rows: [&[f64]; PANEL] = std::array::from_fn(|m| below(k + m));
            // Columns k to k + 2 take the updates of the rows that reach them, in order.
            for x in k..k + PANEL - 1 {
                for m in 0..=x - k {
                    row[x - i] -= c[m] * rows[m][x];
                }
            }
            let last = k + PANEL - 1;
            for ((((r, b0), b1), b2), b3) in row[last - i..]
                .iter_mut()
                .zip(&rows[0][last..])
                .zip(&rows[1][last..])
                .zip(&rows[2][last..])
                .zip(&rows[3][last..])
            {
                *r = (((*r - c[0] * b0) - c[1] * b1) - c[2] * b2) - c[3] * b3;
            }
            k += PANEL;
        }
        for k in k..n {
            let c = u[i * n + k];
            for (r, b) in row[k - i..].iter_mut().zip(&below(k)[k..]) {
                *r -= c * b;
            }
        }
        let d = u[i * n + i];
        row.iter_mut().for_each(|r| *r /= d);
    }
    inv
}

/// The transpose of the `n` x `n` matrix `a` (row-major).
#[inline(always)]
pub(super) fn transpose(a: &[f64], n: usize) -> Vec<f64> {
    let mut t = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            t[j * n + i] = a[i * n + j];
        }
    }
    t
}

/// L^-1 b, for `inv` = L^-1 (lower triangular, row-major): each row's [`dot`] with `b`.
#[inline(always)]
pub(super) fn lower_times(inv: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { lower_times_avx2(inv, n, b) };
    }
    lower_times_portable(inv, n, b)
}

#[inline(always)]
pub(super) fn lower_times_portable(inv: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    (0..n)
        .map(|i| dot(&inv[i * n..=i * n + i], &b[..=i]))
        .collect()
}

/// [`lower_times_portable`] to the bit, four rows at a time: a row's [`dot`] is four running
/// sums, each waiting on its own last addition; four rows' sums do not wait on each other.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) fn lower_times_avx2(inv: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    use std::arch::x86_64::{
        __m256d, _mm256_add_pd, _mm256_loadu_pd, _mm256_mul_pd, _mm256_setzero_pd, _mm256_storeu_pd,
    };
    let load = |values: &[f64], c: usize| {
        let chunk = &values[4 * c..4 * c + 4];
        // SAFETY: `chunk` holds four f64s (the slice above checks it).
        unsafe { _mm256_loadu_pd(chunk.as_ptr()) }
    };
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    while i + 4 <= n {
        let rows: [&[f64]; 4] = std::array::from_fn(|r| &inv[(i + r) * n..=(i + r) * n + i + r]);
        // The rows are i + 1 to i + 4 long: whole chunks of 4 differ by at most one.
        let common = (i + 1) / 4;
        let mut acc: [__m256d; 4] = [_mm256_setzero_pd(); 4];
        for c in 0..common {
            let bc = load(b, c);
            for (acc, row) in acc.iter_mut().zip(&rows) {
                *acc = _mm256_add_pd(*acc, _mm256_mul_pd(load(row, c), bc));
            }
        }
        for (acc, row) in acc.iter_mut().zip(&rows) {
            if row.len() / 4 > common {
                *acc = _mm256_add_pd(*acc, _mm256_mul_pd(load(row, common), load(b, common)));
            }
            let mut sums = [0.0; 4];
            // SAFETY: `sums` holds four f64s.
            unsafe { _mm256_storeu_pd(sums.as_mut_ptr(), *acc) };
            let whole = row.len() / 4 * 4;
            let tail: f64 = row[whole..]
                .iter()
                .zip(&b[whole..])
                .map(|(x, y)| x * y)
                .sum();
            out.push((sums[0] + sums[1]) + (sums[2] + sums[3]) + tail);
        }
        i += 4;
    }
    out.extend((i..n).map(|i| dot(&inv[i * n..=i * n + i], &b[..=i])));
    out
}

/// L^-T b, for `inv` = L^-1: the rows of L^-1 scaled by b and summed.
#[inline(always)]
pub(super) fn lower_t_times(inv: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    let mut x = vec![0.0; n];
    for (i, &bi) in b.iter().enumerate().take(n) {
        for (xj, a) in x.iter_mut().zip(&inv[i * n..=i * n + i]) {
            *xj += bi * a;
        }
    }
    x
}

/// (L L^T)^-1 = L^-T L^-1 from `inv` = L^-1: a sum over its rows of their outer products
/// ([`PANEL`] rows at a time, each entry's sum in row order).
#[inline(always)]
pub(super) fn inverse_from_lower_inverse(inv: &[f64], n: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * n];
    let row = |i: usize| &inv[i * n..=i * n + i];
    let mut i = 0;
    while i + PANEL <= n {
        let rows: [&[f64]; PANEL] = std::array::from_fn(|m| row(i + m));
        // Entries (a, b) with a <= i: all four rows reach them.
        for a in 0..=i {
            let ra: [f64; PANEL] = std::array::from_fn(|m| rows[m][a]);
            for ((((o, r0), r1), r2), r3) in out[a * n..=a * n + a]
                .iter_mut()
                .zip(rows[0])
                .zip(rows[1])
                .zip(rows[2])
                .zip(rows[3])
            {
                *o = (((*o + ra[0] * r0) + ra[1] * r1) + ra[2] * r2) + ra[3] * r3;
            }
        }
        // Rows a = i + 1 to i + 3: the rows that reach them, in order.
        for (m, r) in rows.iter().enumerate().skip(1) {
            for a in i + 1..=i + m {
                let ra = r[a];
                for (o, &rb) in out[a * n..=a * n + a].iter_mut().zip(*r) {
                    *o += ra * rb;
                }
            }
        }
        i += PANEL;
    }
    for i in i..n {
        let r = row(i);
        for (a, &ra) in r.iter().enumerate() {
            for (o, &rb) in out[a * n..=a * n + a].iter_mut().zip(r) {
                *o += ra * rb;
            }
        }
    }
    for a in 0..n {
        for b in 0..a {
            out[b * n + a] = out[a * n + b];
        }
    }
    out
}
